package sim

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/scenarios"
)

// pgSweepSeeds is how many seeds of each of portfolio and late-result go
// test runs on PostgreSQL, pgSweepParallel at a time (each world in a
// schema of its own; a seed waits on the server most of its time).
const (
	pgSweepSeeds    = 100
	pgSweepParallel = 8
)

// testPostgresOptions are the tests' stores' options: the real clock
// times the waits for a shared server that refused a connection for
// having too many clients, which are waits for other programs, not for
// anything of the test's (dbpool_pg.go).
var testPostgresOptions = PostgresOptions{Clock: clockwork.NewRealClock()}

// postgresStore returns a store on the test server, closed (its schemas
// dropped) when the test ends; it skips the test when no server is named
// (fails it with CI set).
func postgresStore(t *testing.T) Store {
	t.Helper()
	st, err := PostgresStore(pgtest.ServerURL(t), testPostgresOptions)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	return st
}

// injectedError matches an injected storage error in a trace line, from
// the queue's words for the statement it hit, if any, through the driver
// operation to the fault's name.
var injectedError = regexp.MustCompile(`(?:queue: [^()]*?)?\b(open|prepare|ping|begin|statement|commit): .*?\(faults: injected ([a-z_]+)\)`)

// storeNeutral rewrites a trace line's injected storage errors to the
// fault's name alone. The two stores' drivers word them differently (a
// SQLSTATE against a SQLite result code); on PostgreSQL a fault that
// loses the connection makes the next operation open a new one, so an
// outage refuses it at "open" or "prepare" where SQLite's single
// connection is refused at "begin" or "statement"; and the stores run
// different statements for one operation (PostgreSQL's submit is one,
// submit_one, where SQLite's first is the key's lookup), so a fault hits
// a statement each names its own way.
func storeNeutral(line string) string { return injectedError.ReplaceAllString(line, "<$2>") }

// TestPostgresSweeps runs seeds 1-100 of portfolio and of late-result on
// PostgreSQL, fused as production runs it, and on SQLite, every invariant
// and the oracle checked: every seed must pass on both stores, and a seed
// on which no storage fault landed on a fused statement (submit_one,
// complete_and_claim, which SQLite runs as several statements of a
// transaction) must end with the same task outcomes on both. A fault on a
// fused statement may part the runs: PostgreSQL says "outcome unknown"
// where SQLite, whose fault hit a statement before the COMMIT, says "not
// applied", and the callers and workers then take different paths, each
// of which its own oracle holds to the protocol.
func TestPostgresSweeps(t *testing.T) {
	st := postgresStore(t)
	for _, sc := range []scenarios.Scenario{scenarios.Portfolio(), scenarios.LateResult()} {
		t.Run(sc.Name, func(t *testing.T) {
			var mu sync.Mutex
			touched, sameTrace := 0, 0
			seeds := make(chan uint64)
			var wg sync.WaitGroup
			for range pgSweepParallel {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for seed := range seeds {
						pg := Run(Config{Scenario: sc, Seed: seed, Store: st, Trace: true})
						lite := Run(Config{Scenario: sc, Seed: seed, Trace: true})
						problem := ""
						switch {
						case !pg.Pass:
							problem = fmt.Sprintf("fails on postgres: %s\n%s", pg.Summary(), strings.Join(pg.Tail, "\n"))
						case !lite.Pass:
							problem = "fails on sqlite: " + lite.Summary()
						case pg.FusedFaults == 0 && !reflect.DeepEqual(pg.Outcomes, lite.Outcomes):
							problem = fmt.Sprintf("no fault landed on a fused statement, yet the tasks ended otherwise than on sqlite:\npostgres: %v\nsqlite:   %v\n%s",
								pg.Outcomes, lite.Outcomes, traceDifference(pg.Trace, lite.Trace))
						case len(pg.Outcomes) == 0:
							problem = "no task outcomes read"
						}
						mu.Lock()
						if problem != "" {
							t.Errorf("seed %d: %s\nreproduce: leasehold sim --store postgres --scenario %s --seed %d", seed, problem, sc.Name, seed)
						}
						if pg.FusedFaults > 0 {
							touched++
						}
						if traceDifference(pg.Trace, lite.Trace) == "" {
							sameTrace++
						}
						mu.Unlock()
					}
				}()
			}
			for seed := uint64(1); seed <= pgSweepSeeds; seed++ {
				seeds <- seed
			}
			close(seeds)
			wg.Wait()
			require.Positive(t, touched, "no seed put a fault on a fused statement")
			require.Less(t, touched, pgSweepSeeds, "every seed put a fault on a fused statement: nothing was compared")
			t.Logf("%d seeds passed on both stores; %d had a fault on a fused statement; %d of the others ended as on sqlite, %d with sqlite's trace but for the wording of injected errors",
				pgSweepSeeds, touched, pgSweepSeeds-touched, sameTrace)
		})
	}
}

// followLine matches the trace line of a follower's read or wait: what a
// page holds, and whether a wait parks, depends on the events' sequence
// numbers (a window is a range of them), which PostgreSQL may skip where
// a transaction rolled back and SQLite does not. The read changes nothing
// and takes no fault (a wait's batch is made whether it parked or not),
// so the traces meet again on the next line.
var followLine = regexp.MustCompile(`^\d+ \+\d+ms follow: follow( wait)? -> `)

// traceDifference names the first line where two stores' traces differ
// other than in the wording of an injected storage error or in what a
// follower's page holds, or "".
func traceDifference(pg, lite []string) string {
	for i := range min(len(pg), len(lite)) {
		if followLine.MatchString(pg[i]) && followLine.MatchString(lite[i]) {
			continue
		}
		if a, b := storeNeutral(pg[i]), storeNeutral(lite[i]); a != b {
			return fmt.Sprintf("trace line %d differs from sqlite's:\npostgres: %s\nsqlite:   %s", i, pg[i], lite[i])
		}
	}
	if len(pg) != len(lite) {
		return fmt.Sprintf("trace has %d lines, sqlite's %d", len(pg), len(lite))
	}
	return ""
}

// TestStoreNeutral checks that the rewrite removes just the wording.
func TestStoreNeutral(t *testing.T) {
	pg := `13 +100ms step w1: w1 claim -> storage error; retry in 50ms err="queue: claim: open: FATAL: the database system is not accepting connections (SQLSTATE 57P03) (faults: injected unavailable)"`
	lite := `13 +100ms step w1: w1 claim -> storage error; retry in 50ms err="queue: claim: statement: storage unavailable (faults: injected unavailable)"`
	require.Equal(t, storeNeutral(lite), storeNeutral(pg))
	require.Equal(t, `13 +100ms step w1: w1 claim -> storage error; retry in 50ms err="<unavailable>"`, storeNeutral(pg))
	busy := `x: queue: heartbeat: begin: begin: database is locked (5) (SQLITE_BUSY) (faults: injected busy)`
	require.NotEqual(t, storeNeutral(busy), storeNeutral(lite))
}

// pgFingerprintSeeds are the seeds whose fingerprints
// TestPostgresSameSeedSameFingerprint compares across processes.
var pgFingerprintSeeds = []uint64{1, 2, 3}

// TestPostgresSameSeedSameFingerprint runs portfolio and late-result
// seeds 1-3 on each store in this process and, at the same time, in two
// others (GOMAXPROCS 1 and 2), each PostgreSQL world in a schema of its
// own, and compares the fingerprints: each store's own is stable, though
// the two stores' differ wherever a fault lands on a fused statement.
func TestPostgresSameSeedSameFingerprint(t *testing.T) {
	if os.Getenv("LEASEHOLD_SIM_PG_CHILD") != "" {
		return
	}
	st := postgresStore(t)
	var children []*exec.Cmd
	var outs []*strings.Builder
	for _, procs := range []string{"1", "2"} {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestPostgresFingerprintChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "LEASEHOLD_SIM_PG_CHILD=1", "GOMAXPROCS="+procs)
		out := &strings.Builder{}
		cmd.Stdout, cmd.Stderr = out, out
		require.NoError(t, cmd.Start())
		children, outs = append(children, cmd), append(outs, out)
	}
	want := pgFingerprints(st)
	for _, line := range want {
		t.Log("fingerprint", line)
	}
	for i, cmd := range children {
		require.NoError(t, cmd.Wait(), "%s", outs[i].String())
		var got []string
		for _, line := range strings.Split(outs[i].String(), "\n") {
			if rest, ok := strings.CutPrefix(line, "fingerprint "); ok {
				got = append(got, rest)
			}
		}
		require.Equal(t, want, got, "child %d (GOMAXPROCS %s)", i, cmd.Env[len(cmd.Env)-1])
	}
}

// TestPostgresFingerprintChild prints fingerprints for
// TestPostgresSameSeedSameFingerprint.
func TestPostgresFingerprintChild(t *testing.T) {
	if os.Getenv("LEASEHOLD_SIM_PG_CHILD") == "" {
		t.Skip("run by TestPostgresSameSeedSameFingerprint")
	}
	for _, line := range pgFingerprints(postgresStore(t)) {
		fmt.Println("fingerprint " + line)
	}
}

// pgFingerprints runs the seeds on both stores, all at once, and lists
// their fingerprints in order.
func pgFingerprints(st Store) []string {
	scs := []scenarios.Scenario{scenarios.Portfolio(), scenarios.LateResult()}
	stores := []Store{st, {}}
	n := len(pgFingerprintSeeds)
	out := make([]string, len(stores)*len(scs)*n)
	var wg sync.WaitGroup
	for k, store := range stores {
		for i, sc := range scs {
			for j, seed := range pgFingerprintSeeds {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := Run(Config{Scenario: sc, Seed: seed, Store: store})
					out[(k*len(scs)+i)*n+j] = fmt.Sprintf("%s %s %d %s pass=%t", store.Name(), sc.Name, seed, r.Fingerprint, r.Pass)
				}()
			}
		}
	}
	wg.Wait()
	return out
}

// TestPostgresStoreResetIsFresh checks that a schema a world has used,
// reset, holds exactly what a newly made and migrated schema holds: every
// table's rows and every sequence's state.
func TestPostgresStoreResetIsFresh(t *testing.T) {
	st := postgresStore(t)
	r := Run(Config{Scenario: scenarios.Portfolio(), Seed: 1, Store: st})
	require.True(t, r.Pass, r.Summary())
	ctx := context.Background()
	used, err := st.pg.take(ctx) // the schema seed 1 ran in, reset
	require.NoError(t, err)
	defer st.pg.give(used)
	other := postgresStore(t).pg
	fresh, err := other.take(ctx) // a new store's first schema, just migrated
	require.NoError(t, err)
	pr := st.pg.pristine
	require.NotEmpty(t, pr.filled, "migrating seeds settings and tallies")
	require.NotEmpty(t, pr.sequences)
	require.Equal(t, dumpSchema(t, other, fresh, pr), dumpSchema(t, st.pg, used, pr))
}

// dumpSchema returns every row of every table of pr and every sequence's
// state, in ws's schema of p, as text in a fixed order.
func dumpSchema(t *testing.T, p *pgStore, ws *worldSchema, pr *pristine) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	require.NoError(t, p.withAdmin(ctx, func(admin *pgx.Conn) error {
		for _, table := range pr.tables {
			var rows string
			if err := admin.QueryRow(ctx, "SELECT COALESCE(string_agg(r::TEXT, E'\\n' ORDER BY r::TEXT COLLATE \"C\"), '') FROM "+
				ident(ws.name, table)+" r").Scan(&rows); err != nil {
				return err
			}
			out = append(out, table+":\n"+rows)
		}
		for _, s := range pr.sequences {
			var value int64
			var called bool
			if err := admin.QueryRow(ctx, "SELECT last_value, is_called FROM "+ident(ws.name, s.name)).Scan(&value, &called); err != nil {
				return err
			}
			out = append(out, fmt.Sprintf("%s: %d %t", s.name, value, called))
		}
		return nil
	}))
	return out
}

// TestPostgresStoreWaitsOutRefusedConnections runs seeds on a server that
// refuses the store's connections for having too many clients (SQLSTATE
// 53300: a role allowed three connections, the owner's, the admin's and
// one world's, while four worlds run at once): the store dials again
// until a world's connection closes, no world sees a refusal, and every
// seed passes with the fingerprint it has on a server with room.
func TestPostgresStoreWaitsOutRefusedConnections(t *testing.T) {
	server := pgtest.ServerURL(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, server)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, conn.Close(ctx)) }) // after the role's drop
	role := fmt.Sprintf("leasehold_sim_limited_%d", os.Getpid())
	var database string
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_database()").Scan(&database))
	// The role may make schemas and set the settings the stored
	// functions set (functions.sql); a superuser's connections are not
	// limited.
	_, err = conn.Exec(ctx, "DROP ROLE IF EXISTS "+ident(role)+"; CREATE ROLE "+ident(role)+" LOGIN CONNECTION LIMIT 3; "+
		"GRANT CREATE ON DATABASE "+ident(database)+" TO "+ident(role)+"; "+
		"GRANT SET ON PARAMETER \"leasehold.counted\", \"leasehold.trailed\" TO "+ident(role))
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := conn.Exec(ctx, "DROP OWNED BY "+ident(role)+" CASCADE; REVOKE SET ON PARAMETER \"leasehold.counted\", \"leasehold.trailed\" FROM "+ident(role)+"; DROP ROLE "+ident(role))
		require.NoError(t, err)
	})
	u, err := url.Parse(server)
	require.NoError(t, err)
	u.User = url.User(role) // the server's trust authentication, as for the test's own role
	limited, err := PostgresStore(u.String(), PostgresOptions{ConnsMax: 6, Clock: clockwork.NewRealClock()})
	require.NoError(t, err)
	defer func() { require.NoError(t, limited.Close()) }()

	sc := scenarios.LateResult()
	const seeds = 4
	results := make([]Result, seeds)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { results[i] = Run(Config{Scenario: sc, Seed: uint64(i + 1), Store: limited}) })
	}
	wg.Wait()
	roomy := postgresStore(t)
	for i, r := range results {
		require.True(t, r.Pass, "seed %d: %s", i+1, r.Summary())
		want := Run(Config{Scenario: sc, Seed: uint64(i + 1), Store: roomy})
		require.Equal(t, want.Fingerprint, r.Fingerprint, "seed %d", i+1)
	}
	require.Positive(t, limited.pg.conns.refused.Load(), "the server refused no connection: nothing was waited out")
	t.Logf("%d dials refused and dialled again", limited.pg.conns.refused.Load())
}

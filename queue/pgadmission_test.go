package queue_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// Admission by slots on PostgreSQL (functions.sql's admission), proved on
// sessions of their own: what each transaction holds and waits for is
// set up statement by statement, so the interleavings the lock order is
// about happen every run.

// pgSubmitOne is a lone submit as the store runs it: id, user, key, now.
const pgSubmitOne = `SELECT outcome, n, lim FROM submit_one($1, $2, $3, 'h', 'synthetic', '{}', 0, $4, 0, $4, 1, 1, '', 0, $2, '', true)`

// pgAdmissionTimeout bounds every wait of these tests: a statement that
// should not wait and does fails here, not at the test binary's timeout.
const pgAdmissionTimeout = 30 * time.Second

// pgSessions opens a fresh schema and n sessions on it, each with its
// backend's process ID.
func pgSessions(t *testing.T, n int) (*sql.DB, []*sql.Conn, []int) {
	t.Helper()
	url := pgtest.Fresh(t, migratePostgres)
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	conns := make([]*sql.Conn, n)
	pids := make([]int, n)
	for i := range conns {
		conns[i], err = db.Conn(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { conns[i].Close() })
		require.NoError(t, conns[i].QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pids[i]))
	}
	return db, conns, pids
}

// submitOutcome is a lone submit's outcome: inserted, queue_full, ...,
// and the count and limit a refusal names.
type submitOutcome struct {
	outcome  string
	n, limit int64
	err      error
}

// submitOn runs a lone submit on q (a session, or a transaction) and
// sends its outcome to out.
func submitOn(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, id, user, key string, out chan<- submitOutcome) {
	var o submitOutcome
	o.err = q.QueryRowContext(ctx, pgSubmitOne, id, user, key, model.Millis(conformanceEpoch)).Scan(&o.outcome, &o.n, &o.limit)
	out <- o
}

// awaitLockWait returns once the backend pid waits for a lock of the
// kind given (advisory, transactionid), failing the test if it does not
// within pgAdmissionTimeout.
func awaitLockWait(t *testing.T, db *sql.DB, pid int, event string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pgAdmissionTimeout)
	defer cancel()
	for {
		var waiting bool
		require.NoError(t, db.QueryRowContext(ctx, `SELECT COALESCE(wait_event_type = 'Lock' AND wait_event = $2, false)
		    FROM pg_stat_activity WHERE pid = $1`, pid, event).Scan(&waiting), "backend %d never waited for a %s lock", pid, event)
		if waiting {
			return
		}
	}
}

// TestPostgresAdmissionFarFromTheCapsDoesNotWait: a submit far from every
// cap holds a slot of its own; another submit of the same user, on
// another session, goes through while the first is still open, and each
// transaction holds one slot, not the exclusive path. (The user's row is
// there: the first submits of a new user wait for each other's insert of
// it, once.)
func TestPostgresAdmissionFarFromTheCapsDoesNotWait(t *testing.T) {
	_, s, _ := pgSessions(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), pgAdmissionTimeout)
	defer cancel()
	out := make(chan submitOutcome, 3)
	submitOn(ctx, s[0], "t_a0", "ana", "a0", out)
	require.Equal(t, submitOutcome{outcome: "inserted"}, <-out)
	open, err := s[0].BeginTx(ctx, nil)
	require.NoError(t, err)
	defer open.Rollback()
	submitOn(ctx, open, "t_a1", "ana", "a1", out)
	require.Equal(t, submitOutcome{outcome: "inserted"}, <-out)
	var held string
	require.NoError(t, open.QueryRowContext(ctx, "SELECT current_setting('leasehold.admission_held')").Scan(&held))
	require.NotContains(t, []string{"", "0", "-1"}, held, "the open submit holds a slot, not the exclusive path")

	submitOn(ctx, s[1], "t_a2", "ana", "a2", out)
	require.Equal(t, submitOutcome{outcome: "inserted"}, <-out, "a second submit of the same user did not wait for the first")
	require.NoError(t, open.Commit())
	var tasks int
	require.NoError(t, s[1].QueryRowContext(ctx, "SELECT COUNT(*) FROM tasks").Scan(&tasks))
	require.Equal(t, 3, tasks)
}

// TestPostgresAdmissionRefusesOnTheExactCount: near the cap a lone submit
// takes the exclusive path, which waits for the fast-path submit in
// flight; its refusal names the count with that submit committed, and
// after a rollback it is admitted.
func TestPostgresAdmissionRefusesOnTheExactCount(t *testing.T) {
	for _, end := range []string{"commit", "rollback"} {
		t.Run(end, func(t *testing.T) {
			db, s, pids := pgSessions(t, 2)
			ctx, cancel := context.WithTimeout(context.Background(), pgAdmissionTimeout)
			defer cancel()
			open, err := s[0].BeginTx(ctx, nil)
			require.NoError(t, err)
			defer open.Rollback()
			out := make(chan submitOutcome, 2)
			submitOn(ctx, open, "t_a1", "ana", "a1", out)
			require.Equal(t, submitOutcome{outcome: "inserted"}, <-out)

			// The cap is now one task: bob's submit is near it, and takes
			// the exclusive path, behind ana's slot.
			_, err = db.ExecContext(ctx, "UPDATE settings SET value = 1 WHERE key = 'depth_max'")
			require.NoError(t, err)
			go submitOn(ctx, s[1], "t_b1", "bob", "b1", out)
			awaitLockWait(t, db, pids[1], "advisory")
			if end == "commit" {
				require.NoError(t, open.Commit())
				require.Equal(t, submitOutcome{outcome: "queue_full", n: 1, limit: 1}, <-out)
				return
			}
			require.NoError(t, open.Rollback())
			require.Equal(t, submitOutcome{outcome: "inserted"}, <-out)
		})
	}
}

// TestPostgresAdmissionLockOrder is the shape that deadlocked admission
// grants: a group transaction whose first member inserted a (user, key)
// and whose later member is near a cap, while a lone submit of that key
// holds a slot and waits for the key. The group may not wait for the
// exclusive path once it has written: its try fails at once with LH002 (a
// conflict the queue runs again), never a deadlock the server must find,
// and the lone submit goes on once the group rolls back.
func TestPostgresAdmissionLockOrder(t *testing.T) {
	db, s, pids := pgSessions(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), pgAdmissionTimeout)
	defer cancel()
	group, err := s[0].BeginTx(ctx, nil)
	require.NoError(t, err)
	defer group.Rollback()
	out := make(chan submitOutcome, 2)
	submitOn(ctx, group, "t_g1", "ana", "k1", out)
	require.Equal(t, submitOutcome{outcome: "inserted"}, <-out)

	go submitOn(ctx, s[1], "t_l1", "ana", "k1", out)
	awaitLockWait(t, db, pids[1], "transactionid")

	// The group's next member is near the cap (lowered in the group's
	// own view alone).
	_, err = group.ExecContext(ctx, "UPDATE settings SET value = 2 WHERE key = 'depth_max'")
	require.NoError(t, err)
	submitOn(ctx, group, "t_g2", "bob", "k2", out)
	failed := <-out
	var pgErr *pgconn.PgError
	require.True(t, errors.As(failed.err, &pgErr), "the group's later member fails: %v", failed.err)
	require.Equal(t, "LH002", pgErr.Code, "an admission conflict, not a deadlock: %v", pgErr)
	require.NoError(t, group.Rollback())
	require.Equal(t, submitOutcome{outcome: "inserted"}, <-out, "the lone submit goes on")
}

// The admission race re-executes the test binary as submitting
// processes, each with a pool of its own, against one schema.
const (
	pgAdmissionChildEnv  = "LEASEHOLD_PG_ADMISSION_CHILD"
	pgAdmissionURLEnv    = "LEASEHOLD_PG_ADMISSION_URL"
	pgAdmissionCaseEnv   = "LEASEHOLD_PG_ADMISSION_CASE"
	pgAdmissionProcesses = 8
	pgAdmissionCallers   = 4 // goroutines a process, so its submits also run in group commits
	pgAdmissionStartLock = 7424698
	// pgAdmissionSlotTasks is the tasks a slot admits in these runs: with
	// 64 slots the margin is 63 tasks, so each run admits on the fast path
	// far from its cap and on the exclusive path near it.
	pgAdmissionSlotTasks = 1
)

// pgAdmissionCase is one race: the limits, and each caller's submits,
// user by user in turn.
type pgAdmissionCase struct {
	name         string
	depthMax     int
	userDepthMax int
	users        []string
	submits      int // of each caller
}

var pgAdmissionCases = []pgAdmissionCase{
	{name: "global", depthMax: 300, userDepthMax: 0, users: []string{"ana", "bob", "cy", "dee"}, submits: 15},
	{name: "user", depthMax: 100_000, userDepthMax: 150, users: []string{"ana", "bob", "cy", "dee"}, submits: 30},
}

// TestPostgresAdmissionProcesses: 8 processes of 4 callers each submit
// at once against a depth cap, global or per user, with fast-path
// margins small enough that the race crosses from the fast path to the
// exclusive one. Exactly the cap's tasks are admitted (never more, and
// none refused below it), and every refusal names the exact count: the
// cap itself.
func TestPostgresAdmissionProcesses(t *testing.T) {
	if child := os.Getenv(pgAdmissionChildEnv); child != "" {
		pgAdmissionChild(t, child, os.Getenv(pgAdmissionURLEnv), os.Getenv(pgAdmissionCaseEnv))
		return
	}
	for _, c := range pgAdmissionCases {
		t.Run(c.name, func(t *testing.T) { pgAdmissionRace(t, c) })
	}
}

func pgAdmissionRace(t *testing.T, c pgAdmissionCase) {
	url := pgtest.Fresh(t, migratePostgres)
	ctx := context.Background()
	q, err := queue.Open(ctx, queue.Options{Path: url, Clock: clockwork.NewFakeClockAt(conformanceEpoch), IDs: model.NewSeededIDs(1)})
	require.NoError(t, err)
	defer q.Close()
	limits, _, err := q.Limits(ctx)
	require.NoError(t, err)
	limits.DepthMax, limits.UserDepthMax = c.depthMax, c.userDepthMax
	require.NoError(t, q.SetLimits(ctx, limits, "test"))
	_, err = queue.DBOf(q).ExecContext(ctx, "SELECT admission_resize($1)", pgAdmissionSlotTasks)
	require.NoError(t, err)

	runCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	gate, err := queue.DBOf(q).Conn(ctx)
	require.NoError(t, err)
	defer gate.Close()
	_, err = gate.ExecContext(ctx, "SELECT pg_advisory_lock($1)", pgAdmissionStartLock)
	require.NoError(t, err)
	cmds := make([]*exec.Cmd, pgAdmissionProcesses)
	outs := make([]*strings.Builder, pgAdmissionProcesses)
	for i := range cmds {
		cmd := exec.CommandContext(runCtx, os.Args[0], "-test.run=^TestPostgresAdmissionProcesses$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), pgAdmissionChildEnv+"="+strconv.Itoa(i), pgAdmissionURLEnv+"="+url,
			pgAdmissionCaseEnv+"="+c.name)
		outs[i] = &strings.Builder{}
		cmd.Stdout, cmd.Stderr = outs[i], outs[i]
		require.NoError(t, cmd.Start())
		cmds[i] = cmd
	}
	for waiting := 0; waiting < pgAdmissionProcesses; {
		require.NoError(t, runCtx.Err(), "%d of %d processes at the start line", waiting, pgAdmissionProcesses)
		require.NoError(t, gate.QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_locks
		    WHERE locktype = 'advisory' AND objid = $1 AND NOT granted`, pgAdmissionStartLock).Scan(&waiting))
	}
	_, err = gate.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", pgAdmissionStartLock)
	require.NoError(t, err)
	inserted, refused := 0, 0
	report := regexp.MustCompile(`admission: inserted (\d+) refused (\d+)`)
	for i, cmd := range cmds {
		require.NoError(t, cmd.Wait(), "process %d:\n%s", i, outs[i].String())
		m := report.FindStringSubmatch(outs[i].String())
		require.NotNil(t, m, "process %d reported nothing:\n%s", i, outs[i].String())
		n, _ := strconv.Atoi(m[1])
		r, _ := strconv.Atoi(m[2])
		inserted, refused = inserted+n, refused+r
	}
	submits := pgAdmissionProcesses * pgAdmissionCallers * c.submits
	require.Equal(t, submits, inserted+refused)

	rows, err := queue.DBOf(q).QueryContext(ctx, "SELECT user_id, COUNT(*) FROM tasks GROUP BY user_id")
	require.NoError(t, err)
	byUser := map[string]int{}
	total := 0
	for rows.Next() {
		var user string
		var n int
		require.NoError(t, rows.Scan(&user, &n))
		byUser[user], total = n, total+n
	}
	require.NoError(t, rows.Err())
	require.Equal(t, inserted, total, "the processes' count of their inserts")
	if c.userDepthMax > 0 {
		for _, user := range c.users {
			require.Equal(t, c.userDepthMax, byUser[user], "user %s holds exactly its cap", user)
		}
	} else {
		require.Equal(t, c.depthMax, total, "the queue holds exactly its cap")
	}
	t.Logf("%s: %d submits from %d processes, %d admitted, %d refused", c.name, submits, pgAdmissionProcesses, inserted, refused)
	require.NoError(t, q.CheckCounters(ctx))
}

// pgAdmissionChild is one submitting process: its callers submit at once
// from the start line, and every refusal must name its cap as the count.
func pgAdmissionChild(t *testing.T, child, url, name string) {
	i := slices.IndexFunc(pgAdmissionCases, func(c pgAdmissionCase) bool { return c.name == name })
	require.GreaterOrEqual(t, i, 0, "case %q", name)
	c := pgAdmissionCases[i]
	seed, err := strconv.ParseUint(child, 10, 64)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute+30*time.Second)
	defer cancel()
	q, err := queue.Open(ctx, queue.Options{Path: url, Clock: clockwork.NewFakeClockAt(conformanceEpoch),
		IDs: model.NewSeededIDs(100 + seed), MaxConns: 4})
	require.NoError(t, err)
	defer q.Close()
	_, err = queue.DBOf(q).ExecContext(ctx, "SELECT pg_advisory_lock_shared($1), pg_advisory_unlock_shared($1)", pgAdmissionStartLock)
	require.NoError(t, err)
	exact := regexp.MustCompile(`(\d+) active tasks \(limit (\d+)\)`)
	var inserted, refused atomic.Int64
	errs := make(chan error, pgAdmissionCallers)
	for g := range pgAdmissionCallers {
		go func() {
			errs <- func() error {
				for j := range c.submits {
					user := c.users[j%len(c.users)]
					_, err := q.Submit(ctx, model.SubmitRequest{User: user, Key: fmt.Sprintf("p%s-c%d-%d", child, g, j),
						Payload: `{}`, CostBudget: 1, StepsMax: 1})
					if err == nil {
						inserted.Add(1)
						continue
					}
					if !errors.Is(err, model.ErrQueueFull) {
						return fmt.Errorf("submit %d of caller %d: %w", j, g, err)
					}
					m := exact.FindStringSubmatch(err.Error())
					if m == nil || m[1] != m[2] {
						return fmt.Errorf("refused below the cap: %w", err)
					}
					refused.Add(1)
				}
				return nil
			}()
		}()
	}
	for range pgAdmissionCallers {
		require.NoError(t, <-errs)
	}
	fmt.Printf("admission: inserted %d refused %d\n", inserted.Load(), refused.Load())
}

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/evidence"
	"github.com/leasehold/leasehold/internal/pgtest"
)

// TestSimPostgres: sim --store postgres runs seeds on the server --db
// names (a schema of its own per world, dropped afterwards) and prints
// what sim prints on SQLite, with the same fingerprint twice; bad --store
// and --db values are exit 2, an unreachable server exit 1, each one line
// without the password. Its commands run under lhTest, bounded by the
// test binary's deadline rather than cliTimeout: a sweep on a server other
// processes share takes as long as the server's load makes it, and a run
// ends by itself once its seeds' schedules end.
func TestSimPostgres(t *testing.T) {
	lh := lhTest
	db := withPassword(t, pgtest.ServerURL(t))

	r := lh(t, "sim", "--store", "postgres", "--db", db, "--scenario", "late-result", "--seed", "1", "--seeds", "4", "--json")
	requireNoSecret(t, r)
	require.Equal(t, exitOK, r.code, r.String())
	var fingerprints []string
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var rec evidence.SeedRecord
		require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
		if rec.Record == evidence.RecordSeed {
			require.True(t, rec.Pass, line)
			require.Contains(t, rec.Reproduce, "STORE=postgres")
			fingerprints = append(fingerprints, rec.Fingerprint)
		}
	}
	require.Len(t, fingerprints, 4)
	require.Len(t, summaries(t, r.stdout), 1)
	require.True(t, summaries(t, r.stdout)[0].Pass)

	r = lh(t, "sim", "--store", "postgres", "--db", db, "--scenario", "late-result", "--seed", "2", "--check-determinism")
	requireNoSecret(t, r)
	require.Equal(t, exitOK, r.code, r.String())
	require.Contains(t, r.stdout, "fingerprint: "+fingerprints[1])

	// The store's own cells join the scenario's declared ones: portfolio
	// on PostgreSQL declares its lone submit under each fused fault kind.
	r = lh(t, "sim", "--store", "postgres", "--db", db, "--seed", "1", "--coverage")
	require.Equal(t, exitOK, r.code, r.String())
	require.Regexp(t, `fault +fail_commit@submit_one +\d+ +declared`, r.stdout)
	r = lh(t, "sim", "--seed", "1", "--coverage")
	require.Equal(t, exitOK, r.code, r.String())
	require.NotContains(t, r.stdout, "@submit_one", "sqlite runs no fused statement")

	// Every schema the runs made is gone.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var left int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname LIKE $1",
		fmt.Sprintf("leasehold\\_sim\\_%d\\_%%", os.Getpid())).Scan(&left))
	require.Zero(t, left, "the worlds' schemas are dropped")

	requireUsage(t, lh(t, "sim", "--store", "mysql"), "--store", "mysql")
	requireUsage(t, lh(t, "sim", "--db", db), "--db", "in memory")
	requireUsage(t, lh(t, "sim", "--store", "postgres", "--db", "queue.db"), "--db", "postgres://")
	r = lh(t, "sim", "--store", "postgres", "--db", "postgres://postgres:"+pgSecret+"@[bad/db")
	requireNoSecret(t, r)
	requireUsage(t, r, "--db")
	r = lh(t, "sim", "--store", "postgres", "--db", "postgres://postgres:"+pgSecret+"@127.0.0.1:1/db?connect_timeout=5")
	requireNoSecret(t, r)
	require.Equal(t, exitFail, r.code, r.String())
	requireOneLine(t, r, "connect")
}

// lhTestMargin is what lhTest leaves of the test binary's deadline for
// the test to report a command that did not end.
const lhTestMargin = 30 * time.Second

// lhTest runs the binary in-process with args as lh does, bounded by the
// test binary's deadline (go test -timeout) less lhTestMargin instead of
// cliTimeout, and without a bound when the binary has none.
func lhTest(t *testing.T, args ...string) result {
	t.Helper()
	ctx := t.Context()
	if deadline, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-lhTestMargin))
		defer cancel()
	}
	var out, errOut bytes.Buffer
	code := run(&env{ctx: ctx, stdout: &out, stderr: &errOut}, args)
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

package sim

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
)

// helperEnv, set in a child test process, makes
// TestPostgresStoreHelperProcess hold a store until it is killed.
const helperEnv = "LEASEHOLD_SIM_STORE_HELPER"

// ownerGuard bounds the test's waits on the server: a failure deadline,
// never a synchronisation.
const ownerGuard = 20 * time.Second

// TestPostgresStoreHelperProcess is the killed run of
// TestPostgresStoreDropsTheSchemasOfAKilledRun: it makes a store's first
// schema, prints the store's prefix, and waits on its stdin, which the
// parent never closes.
func TestPostgresStoreHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("the child process of TestPostgresStoreDropsTheSchemasOfAKilledRun")
	}
	st, err := PostgresStore(pgtest.ServerURL(t), testPostgresOptions)
	require.NoError(t, err)
	require.NoError(t, st.Ready(context.Background()))
	fmt.Printf("prefix %s\n", st.pg.prefix)
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	t.Fatal("the parent let the helper go on")
}

// schemasOf lists the schemas whose names start with prefix.
func schemasOf(ctx context.Context, t *testing.T, conn *pgx.Conn, prefix string) []string {
	t.Helper()
	rows, err := conn.Query(ctx, `SELECT nspname::TEXT FROM pg_namespace WHERE starts_with(nspname, $1) ORDER BY 1`, prefix)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

// A store drops the schemas a killed run left, and never those of a run
// that is alive, even one whose process ID no process here has (another
// machine's): the owner lock tells, not the pid.
func TestPostgresStoreDropsTheSchemasOfAKilledRun(t *testing.T) {
	url := pgtest.ServerURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), ownerGuard)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)

	// A live run of another machine: its pid is above any pid_max here.
	remote, err := PostgresStore(url, testPostgresOptions)
	require.NoError(t, err)
	remote.pg.prefix = ownedPrefix + "999999999_1_"
	require.NoError(t, remote.Ready(ctx))
	t.Cleanup(func() { require.NoError(t, remote.Close()) })

	// A run killed with its schemas in place.
	child := exec.Command(os.Args[0], "-test.run=^TestPostgresStoreHelperProcess$", "-test.count=1")
	child.Env = append(os.Environ(), helperEnv+"=1")
	stdin, err := child.StdinPipe()
	require.NoError(t, err)
	defer stdin.Close()
	stdout, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "the helper's prefix line")
	killed, ok := strings.CutPrefix(strings.TrimSpace(line), "prefix ")
	require.True(t, ok, "the helper's first line: %q", line)
	require.Equal(t, []string{killed + "pristine", killed + "w1"}, schemasOf(ctx, t, conn, killed))
	require.NoError(t, child.Process.Kill())
	require.Error(t, child.Wait(), "the helper was killed")
	// The server ends the killed run's session, and its lock, once it
	// reads the closed socket: wait for the lock, on the server.
	_, err = conn.Exec(ctx, "SELECT pg_advisory_lock($1, hashtext($2))", simSchemas.LockClass, killed)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SELECT pg_advisory_unlock($1, hashtext($2))", simSchemas.LockClass, killed)
	require.NoError(t, err)
	require.Len(t, schemasOf(ctx, t, conn, killed), 2, "nothing dropped them yet")

	later := postgresStore(t)
	require.NoError(t, later.Ready(ctx))
	require.Empty(t, schemasOf(ctx, t, conn, killed), "the killed run's schemas are dropped")
	require.Equal(t, []string{remote.pg.prefix + "pristine", remote.pg.prefix + "w1"}, schemasOf(ctx, t, conn, remote.pg.prefix),
		"the live remote run's schemas are kept")
	require.Len(t, schemasOf(ctx, t, conn, later.pg.prefix), 2, "the later run's own")
}

// A store whose prefix's owner lock a live store holds (the same pid and
// number on another machine) takes another prefix rather than share
// schemas.
func TestPostgresStoreTakesAFreePrefix(t *testing.T) {
	url := pgtest.ServerURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), ownerGuard)
	defer cancel()
	first, err := PostgresStore(url, testPostgresOptions)
	require.NoError(t, err)
	first.pg.prefix = ownedPrefix + "999999998_1_"
	require.NoError(t, first.Ready(ctx))
	t.Cleanup(func() { require.NoError(t, first.Close()) })
	second, err := PostgresStore(url, testPostgresOptions)
	require.NoError(t, err)
	second.pg.prefix = first.pg.prefix
	require.NoError(t, second.Ready(ctx))
	t.Cleanup(func() { require.NoError(t, second.Close()) })
	require.Equal(t, ownedPrefix+"999999998_1r1_", second.pg.prefix)
	require.Regexp(t, ownedSchema, second.pg.prefix+"w1")
}

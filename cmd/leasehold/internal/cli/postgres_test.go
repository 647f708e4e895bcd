package cli

import (
	"context"
	"encoding/json"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
)

// pgSecret is the password the PostgreSQL command tests put in every URL:
// the test server trusts local connections, so it is never checked, and it
// must appear in no output.
const pgSecret = "sekrit9pw"

// withPassword returns u with user postgres and password pgSecret.
func withPassword(t *testing.T, u string) string {
	t.Helper()
	parsed, err := url.Parse(u)
	require.NoError(t, err)
	parsed.User = url.UserPassword("postgres", pgSecret)
	return parsed.String()
}

func requireNoSecret(t *testing.T, r result) {
	t.Helper()
	require.NotContains(t, r.stdout+r.stderr, pgSecret, "the password leaked: %s", r)
}

// TestPostgresCommands: --db takes a postgres:// URL, and migrate, submit,
// status, list and inspect work on it; snapshot and restore refuse with
// exit 2 naming pg_dump; a malformed URL is exit 2 and an unreachable
// server exit 1, each one line; no output ever holds the password.
func TestPostgresCommands(t *testing.T) {
	db := withPassword(t, pgtest.Fresh(t, func(context.Context, string) error { return nil }))

	r := lh(t, "list", "--db", db)
	requireNoSecret(t, r)
	requireUsage(t, r, "has no leasehold schema", "leasehold migrate makes it")

	r = lh(t, "submit", "--db", db, "--user", "ana", "--key", "k1", "--payload", `{"steps":[{"cost":1}]}`,
		"--cost-budget", "5", "--steps-max", "3")
	requireNoSecret(t, r)
	requireUsage(t, r, "has no leasehold schema") // only migrate makes the schema

	r = lh(t, "migrate", "--db", db, "--dry-run")
	requireNoSecret(t, r)
	require.Equal(t, exitOK, r.code, r.String())
	require.Contains(t, r.stdout, "pending 0001_baseline.sql")
	require.Contains(t, r.stdout, "pending functions.sql@v")
	require.Contains(t, r.stdout, "postgres:xxxxx@")

	r = lh(t, "migrate", "--db", db)
	requireNoSecret(t, r)
	require.Equal(t, exitOK, r.code, r.String())
	require.Contains(t, r.stdout, "migrated")

	r = lh(t, "migrate", "--db", db)
	require.Equal(t, exitOK, r.code, r.String())
	require.Contains(t, r.stdout, "nothing to do")

	r = lh(t, "submit", "--db", db, "--user", "ana", "--key", "k1", "--payload", `{"steps":[{"cost":1}]}`,
		"--cost-budget", "5", "--steps-max", "3", "--json")
	requireNoSecret(t, r)
	require.Equal(t, exitOK, r.code, r.String())
	var sub struct {
		TaskID string `json:"task_id"`
		Replay bool   `json:"replay"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &sub))
	require.NotEmpty(t, sub.TaskID)
	require.False(t, sub.Replay)

	r = lh(t, "status", sub.TaskID, "--db", db, "--json")
	requireNoSecret(t, r)
	require.Equal(t, exitOK, r.code, r.String())
	var task struct{ State, User string }
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &task))
	require.Equal(t, "queued", task.State)
	require.Equal(t, "ana", task.User)

	for _, args := range [][]string{{"list"}, {"inspect"}, {"events", sub.TaskID}} {
		r = lh(t, append(args, "--db", db)...)
		requireNoSecret(t, r)
		require.Equal(t, exitOK, r.code, "%v: %s", args, r)
	}
	r = lh(t, "list", "--db", db)
	require.Contains(t, r.stdout, sub.TaskID)

	dir := t.TempDir()
	r = lh(t, "snapshot", "create", "--db", db, "--out", filepath.Join(dir, "s.db"))
	requireNoSecret(t, r)
	requireOneLine(t, r, "PostgreSQL database", "pg_dump")
	require.Equal(t, exitUsage, r.code)

	r = lh(t, "restore", filepath.Join(dir, "s.db"), "--to", db)
	requireNoSecret(t, r)
	requireOneLine(t, r, "pg_restore")
	require.Equal(t, exitUsage, r.code)

	r = lh(t, "list", "--db", "postgres://postgres:"+pgSecret+"@127.0.0.1:54x2/postgres")
	requireNoSecret(t, r)
	requireOneLine(t, r, "port is not a number")
	require.Equal(t, exitUsage, r.code)

	r = lh(t, "list", "--db", "postgres://postgres:"+pgSecret+"@127.0.0.1:1/postgres?connect_timeout=5")
	requireNoSecret(t, r)
	requireOneLine(t, r, "127.0.0.1")
	require.Equal(t, exitFail, r.code)
	require.False(t, strings.Contains(r.stderr, "\n\n"))
}

package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/testkit"
)

// dbSecret is the password of the --db values of
// TestDBPasswordIsNeverEchoed; no output may hold "SECRET" in any form.
const dbSecret = "SECRET"

// TestDBPasswordIsNeverEchoed: a PostgreSQL key=value connection string
// given as --db (or LEASEHOLD_DB) was taken for a file path and echoed,
// password included. It is refused (exit 2) naming its keywords, never a
// value; and no command prints a password of a --db in any form: a
// key=value string (quoted, spaced), a URL that connects nowhere,
// percent-encoded, in a query setting, or too malformed to parse.
func TestDBPasswordIsNeverEchoed(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	t.Setenv("LEASEHOLD_DATA_DIR", dir)
	batch := filepath.Join(dir, "batch.jsonl")
	require.NoError(t, os.WriteFile(batch, []byte(`{"user":"ana","key":"b1","payload":{"steps":[]},"cost_budget":5,"steps_max":1}`+"\n"), 0o600))
	tokens := filepath.Join(dir, "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte("ops operate ops-secret-0123456789 *\n"), 0o600))
	snap := filepath.Join(dir, "snap.db")
	require.NoError(t, os.WriteFile(snap, []byte("not a snapshot"), 0o600))

	keyword := []string{
		"host=127.0.0.1 port=1 password=" + dbSecret + "PW",
		"password='" + dbSecret + " PW' host=127.0.0.1 port=1",
		"host=127.0.0.1 port=1 password = " + dbSecret + "PW",
		"dbname=queue host=127.0.0.1 password=" + dbSecret + "\\'PW",
	}
	urls := []string{
		"postgres://u:" + dbSecret + "PW@127.0.0.1:1/db?connect_timeout=2",
		"postgres://u:" + dbSecret + "%2FPW@127.0.0.1:1/db?connect_timeout=2",
		"postgresql://u:" + dbSecret + "/PW@127.0.0.1:1/db",
		"postgres://127.0.0.1:1/db?password=" + dbSecret + "PW&connect_timeout=2",
		"postgres://u:" + dbSecret + "PW@[::1/db",
		"mysql://u:" + dbSecret + "PW@127.0.0.1/db",
		"postgres://u:" + dbSecret + "PW@127.0.0.1:1/db?sslmode=bogus",
		"postgres://u:" + dbSecret + "PW@127.0.0.1:1",
	}
	task := testkit.UnknownTask
	withDB := [][]string{
		{"status", task}, {"list"}, {"events", task}, {"inspect"}, {"metrics"}, {"audit"}, {"reap"},
		{"cancel", task, "--actor", "ops"}, {"approve", task, "--version", "1", "--actor", "ops"},
		{"reject", task, "--version", "1", "--actor", "ops"}, {"requeue", task, "--grant-cost", "0", "--grant-steps", "0", "--actor", "ops"},
		{"resolve", task, "--as", "failed", "--actor", "ops"}, {"settle", task + ".s0", "--applied", "--actor", "ops"},
		{"limits"}, {"limits", "--depth-max", "5", "--actor", "ops"},
		{"schedule", "list"}, {"schedule", "run"}, {"schedule", "remove", "s_00", "--actor", "ops"},
		{"schedule", "add", "--user", "ana", "--payload", onePayload, "--cost-budget", "5", "--steps-max", "2", "--origin", "+1h", "--period", "1h", "--actor", "ops"},
		{"submit", "--user", "ana", "--key", "k1", "--payload", onePayload, "--cost-budget", "5", "--steps-max", "2"},
		{"submit", "--batch", batch}, {"worker", "--id", "w1"}, {"serve", "--addr", "127.0.0.1:0", "--tokens", tokens},
		{"migrate", "--actor", "ops"}, {"migrate", "--dry-run"}, {"snapshot", "create", "--out", filepath.Join(dir, "out.db")},
		{"prune", "--older-than", "24h", "--actor", "ops"}, {"prune", "policy"},
	}
	check := func(args []string, r result, isKeyword bool) {
		t.Helper()
		require.NotContains(t, strings.ToUpper(r.stdout+r.stderr), dbSecret, "%v: %s", args, r)
		if isKeyword {
			requireUsage(t, r, "PostgreSQL key=value connection string", "give it as a URL")
		}
	}
	for _, db := range append(keyword, urls...) {
		isKeyword := strings.HasPrefix(db, "host=") || strings.HasPrefix(db, "password=") || strings.HasPrefix(db, "dbname=")
		for _, args := range withDB {
			check(args, lh(t, append(append([]string(nil), args...), "--db", db)...), isKeyword)
			t.Setenv("LEASEHOLD_DB", db)
			check(args, lh(t, args...), isKeyword)
			t.Setenv("LEASEHOLD_DB", filepath.Join(dir, "unused.db"))
		}
		for _, args := range [][]string{
			{"restore", snap, "--to", db},
			{"sim", "--store", "postgres", "--db", db, "--seed", "1"},
			{"demo", "--postgres", db, "--dir", filepath.Join(dir, "demo")},
		} {
			r := lh(t, args...)
			check(args, r, false)
			require.NotEqual(t, exitOK, r.code, "%v: %s", args, r)
		}
	}
	require.NoFileExists(t, filepath.Join(dir, "unused.db"))
}

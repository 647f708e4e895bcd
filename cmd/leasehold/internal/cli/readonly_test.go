package cli

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// readOnlyMount bind-mounts dir read-only at a new directory and returns
// it: a place no process, root included, can write. It skips the test
// where the machine does not allow mounts.
func readOnlyMount(t *testing.T, dir string) string {
	t.Helper()
	ro := filepath.Join(t.TempDir(), "ro")
	require.NoError(t, os.Mkdir(ro, 0o755))
	if err := syscall.Mount(dir, ro, "", syscall.MS_BIND, ""); err != nil {
		t.Skipf("cannot bind-mount a read-only copy of the directory (needs root and CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() { require.NoError(t, syscall.Unmount(ro, 0)) })
	if err := syscall.Mount("", ro, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
		t.Skipf("cannot remount the bind mount read-only: %v", err)
	}
	return ro
}

// fileState is a file's contents and modification time.
type fileState struct {
	sum   string
	mtime int64
}

func stateOf(t *testing.T, path string) fileState {
	t.Helper()
	st, err := os.Stat(path)
	require.NoError(t, err)
	return fileState{sum: sha256File(t, path), mtime: st.ModTime().UnixNano()}
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// The commands that only read work on a database nobody can write, and
// change nothing: no -wal, -shm or journal appears, the file keeps its
// bytes and its modification time. A command that writes says plainly
// that the database is read-only, and a database at an older schema is
// refused with the advice to migrate it.
func TestReadCommandsWorkOnAReadOnlyDatabase(t *testing.T) {
	f, ids := dataFixture(t)
	gated, version := f.toApproval("gate")
	requireOK(t, f.lh([]string{"snapshot", "create"}, "--out", filepath.Join(f.dir, "snap.db")))
	copyFixture(t, filepath.Join(f.dir, "old.db"))
	ro := readOnlyMount(t, f.dir)
	t.Setenv("LEASEHOLD_DATA_DIR", ro)
	db := filepath.Join(ro, "leasehold.db")
	before, entries := stateOf(t, db), names(t, ro)

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"status", ids[0]}, ids[0]},
		{[]string{"status", gated, "--json"}, gated},
		{[]string{"list"}, ids[1]},
		{[]string{"list", "--state", "queued", "--json"}, ids[0]},
		{[]string{"events", ids[1]}, "cancelled"},
		{[]string{"audit"}, ids[0]},
		{[]string{"audit", "--format", "jsonl", "--task", gated}, gated},
		{[]string{"metrics"}, "depth by state"},
		{[]string{"inspect"}, gated},
		{[]string{"limits"}, "depth_max="},
		{[]string{"schedule", "list", "--json"}, "[]"},
	} {
		r := lh(t, append(c.args, "--db", db)...)
		requireOK(t, r)
		require.Contains(t, r.stdout, c.want, "%v", c.args)
	}
	r := lh(t, "snapshot", "verify", filepath.Join(ro, "snap.db"))
	requireOK(t, r)
	require.Contains(t, r.stdout, "ok integrity")

	require.Equal(t, before, stateOf(t, db), "reading changed the database file")
	require.Equal(t, entries, names(t, ro), "reading created a file beside the database")

	for _, args := range [][]string{
		{"cancel", ids[0], "--actor", "ops"},
		{"approve", gated, "--version", strconv.FormatInt(version, 10), "--actor", "ops"},
		{"submit", "--user", "ana", "--key", "k9", "--payload", onePayload, "--cost-budget", "5", "--steps-max", "2"},
		{"limits", "--depth-max", "5", "--actor", "ops"},
		{"reap"},
	} {
		requireFailed(t, lh(t, append(args, "--db", db)...), "database is read-only: "+db)
	}

	old := filepath.Join(ro, "old.db")
	requireFailed(t, lh(t, "status", ids[0], "--db", old), "schema version 2", "run leasehold migrate --db "+old)
	requireFailed(t, lh(t, "list", "--db", filepath.Join(f.dir, "old.db")), "run leasehold migrate")
}

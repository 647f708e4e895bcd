package cli

// The demo command's checks that need no live run: where it may work (it
// empties its directory, so --dir is checked first). The live run's own
// tests are in internal/liverun.
//
// Tests that set LEASEHOLD_DATA_DIR (t.Setenv) do not run in parallel.

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// demo --dir is checked before anything is removed: inside the allowed
// directory and not that directory itself, not a file, and empty or
// holding a previous demo's result.json. Each refusal exits 2 naming
// --dir and leaves every file where it was.
func TestDemoDirIsCheckedBeforeAnythingIsRemoved(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	t.Setenv("LEASEHOLD_DATA_DIR", root)
	elsewhere, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	write := func(path, text string) {
		t.Helper()
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	}
	write(filepath.Join(elsewhere, "precious.txt"), "someone's work")
	write(filepath.Join(root, "work", "notes.txt"), "an operator's notes")
	write(filepath.Join(root, "other", "result.json"), `{"kind":"fixture"}`)
	write(filepath.Join(root, "broken", "result.json"), `{"kind":`)
	write(filepath.Join(root, "a-file"), "not a directory")
	require.NoError(t, os.Symlink(elsewhere, filepath.Join(root, "link")))

	cases := []struct {
		name, dir string
		want      []string
	}{
		{"outside the allowed directory", elsewhere, []string{"--dir", "outside"}},
		{"through .. to outside", filepath.Join(root, "..", filepath.Base(elsewhere)), []string{"--dir", "outside"}},
		{"through a link to outside", filepath.Join(root, "link"), []string{"--dir", "outside"}},
		{"the allowed directory itself", root, []string{"--dir", "allowed directory itself"}},
		{"a directory of other files", filepath.Join(root, "work"), []string{"--dir", "not empty", "result.json"}},
		{"a result.json that is not a demo's", filepath.Join(root, "other"), []string{"--dir", "not empty"}},
		{"a result.json that does not parse", filepath.Join(root, "broken"), []string{"--dir", "not empty"}},
		{"a file", filepath.Join(root, "a-file"), []string{"--dir", "is a file"}},
		{"empty", "", []string{"--dir", "directory required"}},
	}
	before, beforeElsewhere := tree(t, root), tree(t, elsewhere)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			requireUsage(t, lh(t, "demo", "--dir", c.dir), c.want...)
			require.Equal(t, before, tree(t, root), "a refused demo changed the allowed directory")
			require.Equal(t, beforeElsewhere, tree(t, elsewhere), "a refused demo changed a directory outside")
		})
	}

	// What the demo may empty: a directory that does not exist yet, an
	// empty one, and one holding a previous demo's result.json.
	require.NoError(t, os.Mkdir(filepath.Join(root, "empty"), 0o755))
	write(filepath.Join(root, "previous", "result.json"), `{"kind":"live"}`)
	write(filepath.Join(root, "previous", "w1.log"), "a previous run's log")
	for _, name := range []string{"new", "empty", "previous", filepath.Join("new", "nested")} {
		dir, err := demoDir(filepath.Join(root, name))
		require.NoError(t, err, name)
		require.Equal(t, filepath.Join(root, name), dir)
	}
}

// demo --postgres takes a postgres:// server URL: anything else exits 2
// naming --postgres, and a server that does not answer exits 1 naming it;
// neither shows the URL's password, and neither touches --dir.
func TestDemoPostgresFlagIsChecked(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	t.Setenv("LEASEHOLD_DATA_DIR", root)
	dir := filepath.Join(root, "demo")
	r := lh(t, "demo", "--dir", dir, "--postgres", "mysql://ops:s3cret@db.example/leasehold")
	requireUsage(t, r, "--postgres", "not a postgres:// URL")
	require.NotContains(t, r.stderr, "s3cret")
	r = lh(t, "demo", "--dir", dir, "--postgres", "postgres://ops:s3cret@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=5")
	requireFailed(t, r, "127.0.0.1:1")
	require.NotContains(t, r.stderr, "s3cret")
	_, err = os.Stat(dir)
	require.ErrorIs(t, err, os.ErrNotExist, "a refused demo made its directory")
}

package reports

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWriteFileReplacesALink: WriteFile puts a file of its own at a name
// held by a symbolic link, leaving the link's target as it was; over a
// file it replaces the file whole; where it cannot rename (a directory
// holds the name) it fails and leaves no temporary file.
func TestWriteFileReplacesALink(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	victim := filepath.Join(outside, "victim")
	require.NoError(t, os.WriteFile(victim, []byte("an operator's file"), 0o600))
	path := filepath.Join(dir, "report.json")
	require.NoError(t, os.Symlink(victim, path))

	require.NoError(t, WriteFile(path, []byte("first")))
	got, err := os.ReadFile(victim)
	require.NoError(t, err)
	require.Equal(t, "an operator's file", string(got))
	info, err := os.Lstat(path)
	require.NoError(t, err)
	require.True(t, info.Mode().IsRegular())
	require.Equal(t, os.FileMode(0o644), info.Mode().Perm())

	require.NoError(t, WriteFile(path, []byte("second")))
	got, err = os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "second", string(got))

	require.NoError(t, os.Mkdir(filepath.Join(dir, "taken"), 0o755))
	require.Error(t, WriteFile(filepath.Join(dir, "taken"), []byte("x")))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 2, "report.json and taken; no temporary file")
}

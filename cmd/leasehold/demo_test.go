package main

// The demo's checks that need no live run: where it may work (it empties
// its directory, so --dir is checked first), how it compares running
// spans, and that it stops its metrics sampler before it reports.
//
// Tests that set LEASEHOLD_DATA_DIR (t.Setenv) do not run in parallel.

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

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

// Running spans are compared as times, not as strings: RFC 3339 trims
// trailing zeros of the fraction, so ".3Z" sorts after ".301Z" as text
// although it is earlier.
func TestSpansOverlapComparesTimes(t *testing.T) {
	t.Parallel()
	at := func(frac string) string { return "2030-01-01T00:00:00" + frac + "Z" }
	cases := []struct {
		name    string
		a, b    [][2]string
		overlap bool
	}{
		// As strings ".301Z" < ".3Z", so these touching spans would overlap.
		{"one ends at .3, the other starts at .301", [][2]string{{at(".1"), at(".3")}}, [][2]string{{at(".301"), at(".5")}}, false},
		// As strings ".3Z" < ".301Z" fails, so this overlap would be missed.
		{"one starts at .3, the other ends at .301", [][2]string{{at(".3"), at(".6")}}, [][2]string{{at(".2"), at(".301")}}, true},
		{"one ends where the other starts", [][2]string{{at(""), at(".5")}}, [][2]string{{at(".5"), at(".9")}}, false},
		{"disjoint across a second", [][2]string{{at(".9"), "2030-01-01T00:00:01Z"}}, [][2]string{{"2030-01-01T00:00:01.001Z", "2030-01-01T00:00:02Z"}}, false},
		{"one inside the other", [][2]string{{at(".1"), at(".9")}}, [][2]string{{at(".4"), at(".45")}}, true},
		{"no spans", nil, [][2]string{{at(".1"), at(".2")}}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := spansOverlap(c.a, c.b)
			require.NoError(t, err)
			require.Equal(t, c.overlap, got)
			got, err = spansOverlap(c.b, c.a)
			require.NoError(t, err)
			require.Equal(t, c.overlap, got, "symmetric")
		})
	}
	_, err := spansOverlap([][2]string{{"noon", at(".1")}}, [][2]string{{at(".1"), at(".2")}})
	require.ErrorContains(t, err, "noon")
}

// The demo waits for its sampler to return before it reports, so the
// report reads samples nobody is still appending to. The sampler here runs
// a stand-in for the binary that prints an empty metrics record.
func TestDemoWaitsForTheSamplerBeforeReporting(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "leasehold")
	require.NoError(t, os.WriteFile(self, []byte("#!/bin/sh\necho '{}'\n"), 0o755))
	d := &demo{e: &env{stdout: io.Discard, stderr: io.Discard}, dir: dir, db: filepath.Join(dir, "leasehold.db"),
		self: self, start: time.Now(), sampling: make(chan struct{})}
	d.startSampling()
	d.stopSampling()
	// The sampler takes its first sample before it looks at the stop
	// signal; once stopSampling has returned, that sample is in.
	require.NotEmpty(t, d.res.Samples)

	// Stopping a sampler that never started (the run failed early)
	// returns at once.
	idle := &demo{sampling: make(chan struct{})}
	idle.stopSampling()
	require.Empty(t, idle.res.Samples)
}

package cli

// The kill storm, short: real worker processes (this test binary, run as
// the leasehold binary), five SIGKILLs, one SIGSTOP past the lease, and the
// checker's verdict read back from result.json.
//
// Tests that set LEASEHOLD_DATA_DIR (t.Setenv) do not run in parallel.

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/chaos"
	"github.com/leasehold/leasehold/reports"
)

// asBinary, set in the environment, makes this test binary run as the
// leasehold binary: the chaos run starts its workers from os.Executable.
const asBinary = "LEASEHOLD_TEST_AS_BINARY"

func TestMain(m *testing.M) {
	if os.Getenv(asBinary) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := Run(ctx, os.Stdout, os.Stderr, os.Args[1:])
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// shortChaosMax bounds the short run; it takes about 25 s on two cores.
const shortChaosMax = 2 * time.Minute

func TestChaosShortRunIsCleanAndAsConfigured(t *testing.T) {
	if testing.Short() {
		t.Skip("the short chaos run starts eight worker processes for about 25 s")
	}
	root, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	t.Setenv("LEASEHOLD_DATA_DIR", root)
	t.Setenv(asBinary, "1")
	dir := filepath.Join(root, "chaos")
	ctx, cancel := context.WithTimeout(context.Background(), shortChaosMax)
	defer cancel()
	var out, errOut bytes.Buffer
	code := run(&env{ctx: ctx, stdout: &out, stderr: &errOut}, []string{"chaos", "--kills", "5", "--stops", "1", "--tasks", "24",
		"--seed", "11", "--out", dir})
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	require.Contains(t, out.String(), "chaos: seed 11;", "the seed is printed at the start")

	res, err := chaos.ReadResult(filepath.Join(dir, "result.json"))
	require.NoError(t, err)
	require.True(t, res.Pass, "%+v", res.Findings)
	require.Equal(t, chaos.ResultKind, res.Kind)
	require.Equal(t, uint64(11), res.Seed)
	require.Equal(t, 5, res.Counts.Kills)
	require.Equal(t, 1, res.Counts.Stops)
	require.Equal(t, 24, res.Counts.Tasks)
	require.Equal(t, 1, res.Counts.AimedBefore+res.Counts.AimedAfter+res.Counts.AimMissed, "one of the five kills is aimed")
	require.True(t, res.Findings.Clean(), "%+v", res.Findings)
	require.Equal(t, chaos.PorcupineOK, res.Findings.Porcupine)
	require.Equal(t, "ok", res.Findings.Integrity)
	require.Zero(t, res.Findings.Lost+res.Findings.Duplicated+res.Findings.Unexpected+res.Findings.StaleAccepted+res.Findings.Overspent)
	require.Len(t, res.Lanes, 4, "one lane per service kind")
	settled := 0
	for _, n := range res.Counts.States {
		settled += n
	}
	require.Equal(t, 24, settled, "every task is in the database: %v", res.Counts.States)
	require.Positive(t, res.Counts.Applied, "effects were applied")

	page, err := os.ReadFile(filepath.Join(dir, "index.html"))
	require.NoError(t, err)
	require.Contains(t, string(page), "LIVE")
	require.Contains(t, string(page), "lane plain: kills, stops and recoveries")

	// A second run may empty the directory a previous run left.
	_, err = chaosDir(dir)
	require.NoError(t, err)
}

// Bad flags exit 2 naming the flag, before anything is started or removed.
func TestChaosRefusesBadFlags(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	t.Setenv("LEASEHOLD_DATA_DIR", root)
	keep := filepath.Join(root, "work")
	require.NoError(t, os.MkdirAll(keep, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(keep, "notes.txt"), []byte("an operator's notes"), 0o644))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--kills", "-1"}, "--kills"},
		{[]string{"--kills", "100000"}, "--kills"},
		{[]string{"--stops", "-2"}, "--stops"},
		{[]string{"--tasks", "0"}, "--tasks"},
		{[]string{"--out", keep}, "--out"},
		{[]string{"--out", t.TempDir()}, "--out"},
		{[]string{"--seed", "x"}, "-seed"},
	} {
		requireUsage(t, lh(t, append([]string{"chaos"}, c.args...)...), c.want)
	}
	notes, err := os.ReadFile(filepath.Join(keep, "notes.txt"))
	require.NoError(t, err)
	require.Equal(t, "an operator's notes", string(notes))
}

// The evidence takes the chaos run's figures from its result.json as live
// results, and a violation there fails the report.
func TestEvidenceIncludesTheChaosRunAsLive(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "result.json")
	write := func(r chaos.Result) {
		t.Helper()
		b, err := json.Marshal(r)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, b, 0o644))
	}
	clean := chaos.Result{Kind: chaos.ResultKind, Seed: 9, Machine: map[string]string{"hostname": "box"},
		Settings: chaos.Settings{Kills: 32, Stops: 6, Tasks: 80, Lanes: []string{"dedup", "fenced", "queryable", "plain"}},
		Counts:   chaos.Counts{Tasks: 80, Kills: 32, AimedBefore: 4, AimedAfter: 4, Stops: 6, Applied: 70, StaleRefused: 12},
		Findings: chaos.Findings{Porcupine: chaos.PorcupineOK, Integrity: "ok"}, Pass: true}
	write(clean)
	r := reports.Report{Pass: true, Fixture: reports.Section{Kind: reports.Fixture}, Live: reports.Section{Kind: reports.Live}}
	require.NoError(t, addChaos(&r, path))
	require.True(t, r.Pass)
	require.Len(t, r.Checks, 1)
	for _, res := range r.Checks[0].Results {
		require.Equal(t, reports.Live, res.Kind)
		require.True(t, res.Pass, res.Observed)
		require.Contains(t, res.Inputs, "seed 9 on box")
		require.Equal(t, "make chaos SEED=9", res.Command)
	}

	violated := clean
	violated.Findings.Duplicated, violated.Findings.Porcupine, violated.Pass = 1, chaos.PorcupineIllegal, false
	write(violated)
	r = reports.Report{Pass: true, Fixture: reports.Section{Kind: reports.Fixture}, Live: reports.Section{Kind: reports.Live}}
	require.NoError(t, addChaos(&r, path))
	require.False(t, r.Pass)
	require.False(t, r.Checks[0].Pass())

	// A result that is not a live chaos record, or none at all, is an error.
	require.NoError(t, os.WriteFile(path, []byte(`{"kind":"fixture"}`), 0o644))
	require.Error(t, addChaos(&r, path))
	require.ErrorContains(t, addChaos(&r, filepath.Join(dir, "missing.json")), "make chaos")
}

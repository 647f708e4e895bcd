package cli

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/evidence"
	"github.com/leasehold/leasehold/scenarios"
)

// simInterruptBound bounds how long an interrupted sweep may take to end:
// it finishes the seed it is running (tens of milliseconds) and prints.
const simInterruptBound = 30 * time.Second

// interruptedSweep starts leasehold sim with args as a real process, sends
// it sig once it has printed its first seed record, and returns its exit
// code and what it printed: the seed records, then the summary records.
func interruptedSweep(t *testing.T, sig os.Signal, args ...string) (int, []evidence.SeedRecord, []evidence.SummaryRecord, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"sim"}, args...)...)
	cmd.Env = append(os.Environ(), asBinary+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var out bytes.Buffer
	lines := bufio.NewScanner(stdout)
	lines.Buffer(make([]byte, 64<<10), 16<<20)
	for lines.Scan() {
		out.Write(append(lines.Bytes(), '\n'))
		if strings.Contains(lines.Text(), `"record":"seed"`) {
			require.NoError(t, cmd.Process.Signal(sig))
			break
		}
	}
	exited := make(chan error, 1)
	go func() {
		for lines.Scan() {
			out.Write(append(lines.Bytes(), '\n'))
		}
		exited <- cmd.Wait()
	}()
	select {
	case <-exited:
	case <-time.After(simInterruptBound):
		t.Fatalf("sim %s still running %s after %s; stderr:\n%s", strings.Join(args, " "), simInterruptBound, sig, stderr.String())
	}
	recs, sums, err := evidence.ReadRecords(out.Bytes())
	require.NoError(t, err, "every line is a record:\n%s", out.String())
	return cmd.ProcessState.ExitCode(), recs, sums, stderr.String()
}

// requireResumable checks an interrupted scenario's records: the seeds
// judged from the first, in order, and one summary counting them.
func requireResumable(t *testing.T, scenario string, requested int, recs []evidence.SeedRecord, sums []evidence.SummaryRecord) {
	t.Helper()
	require.NotEmpty(t, recs, "the seeds judged before the signal are printed")
	for i, rec := range recs {
		require.Equal(t, scenario, rec.Scenario)
		require.Equal(t, uint64(1+i), rec.Seed, "seeds in order from the first, none missing")
	}
	require.Len(t, sums, 1, "no scenario starts after the interrupted one")
	sum := sums[0]
	require.Equal(t, scenario, sum.Scenario)
	require.True(t, sum.Interrupted)
	require.False(t, sum.Pass, "an interrupted sweep does not pass")
	require.Equal(t, len(recs), sum.Seeds, "the summary counts the seeds judged")
	require.Equal(t, requested, sum.Requested)
	require.Equal(t, len(recs), sum.Passed+sum.Failed)
	require.Equal(t, len(recs), sum.Coverage.Seeds)
}

// SIGINT stops a sweep of every scenario run in one process: the seed
// running finishes, the seeds judged and the first scenario's summary are
// printed, no later scenario starts, and it exits 130.
func TestSimSweepStopsOnSIGINT(t *testing.T) {
	const requested = 1_000_000
	code, recs, sums, stderr := interruptedSweep(t, os.Interrupt,
		"--scenario", "all", "--seed", "1", "--seeds", "1000000", "--parallel", "1", "--json")
	require.Equal(t, 130, code, "stderr:\n%s", stderr)
	requireResumable(t, scenarios.Names()[0], requested, recs, sums)
	require.Contains(t, stderr, "interrupted (interrupt) after")
}

// SIGTERM stops a sweep split across processes: the children are told to
// stop, the seeds judged in order from the first are printed with the
// summary, it exits 143, and no child outlives it.
func TestSimSweepProcessesStopOnSIGTERM(t *testing.T) {
	const requested = 1_000_000
	code, recs, sums, stderr := interruptedSweep(t, syscall.SIGTERM,
		"--scenario", "portfolio", "--seed", "1", "--seeds", "1000000", "--parallel", "2", "--json")
	require.Equal(t, 143, code, "stderr:\n%s", stderr)
	requireResumable(t, "portfolio", requested, recs, sums)
	require.Contains(t, stderr, "interrupted (terminated) after")
	// The second child ran seeds from 500001: no process with that range
	// is left.
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	require.NoError(t, err)
	require.NotEmpty(t, procs, "this test reads /proc")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // ended meanwhile
		}
		require.NotContains(t, string(b), "--seed\x00500001\x00", "a sweep process outlived the sweep: %s", p)
	}
}

package sim

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/scenarios"
)

// seedLine is what a sweep process prints for one seed of quota.
func seedLine(t *testing.T, seed uint64, verdict string) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"record": SeedLineRecord, "scenario": "quota", "seed": seed,
		"faults": "service=plain", "fingerprint": fmt.Sprintf("f%d", seed), "pass": verdict == "pass"})
	require.NoError(t, err)
	return string(b) + "\n"
}

// A sweep process's seeds count only when it exited 0 or 1 (as its
// verdicts say) and judged every seed of its range in order: a process
// that panicked, was killed or stopped short is an error naming the range
// and the command that reruns it, never a count of passes.
func TestJudgeSweepProcess(t *testing.T) {
	t.Parallel()
	sc, err := scenarios.Get("quota")
	require.NoError(t, err)
	const rerun = "leasehold sim --scenario quota --seed 10 --seeds 3 --parallel 1"
	summary := `{"record":"summary","scenario":"quota"}` + "\n"
	pass3 := seedLine(t, 10, "pass") + seedLine(t, 11, "pass") + seedLine(t, 12, "pass") + summary
	oneFailed := seedLine(t, 10, "pass") + seedLine(t, 11, "fail") + seedLine(t, 12, "fail")

	lines, err := judgeSweepProcess([]byte(pass3), SweepExitPass, "exit status 0", sc, 10, 3, rerun)
	require.NoError(t, err)
	require.Len(t, lines, 3)
	require.JSONEq(t, strings.TrimSpace(seedLine(t, 11, "pass")), string(lines[1].Line), "each seed's whole line is handed on")
	lines, err = judgeSweepProcess([]byte(oneFailed), SweepExitFail, "exit status 1", sc, 10, 3, rerun)
	require.NoError(t, err)
	require.Equal(t, []bool{true, false, false}, []bool{lines[0].Pass, lines[1].Pass, lines[2].Pass})

	bad := []struct {
		name string
		out  string
		code int
		how  string
		want []string
	}{
		{"a panic after every verdict", pass3 + "panic: boom\n", 2, "exit status 2", []string{"exit status 2", "3 of 3"}},
		{"killed mid-range", seedLine(t, 10, "pass"), -1, "signal: killed", []string{"signal: killed", "1 of 3"}},
		{"killed before printing", "", -1, "signal: killed", []string{"signal: killed", "0 of 3"}},
		{"exit 0 with seeds missing", seedLine(t, 10, "pass") + seedLine(t, 11, "pass"), SweepExitPass, "exit status 0", []string{"2 of its 3"}},
		{"exit 1 with seeds missing", seedLine(t, 10, "pass"), SweepExitFail, "exit status 1", []string{"1 of its 3"}},
		{"text among the records", seedLine(t, 10, "pass") + "seed: 11\n" + seedLine(t, 12, "pass"), SweepExitPass, "exit status 0", []string{"not a record"}},
		{"an object that is no record", seedLine(t, 10, "pass") + `{"seed":11}` + "\n", SweepExitPass, "exit status 0", []string{"not a record"}},
		{"seeds out of range", seedLine(t, 10, "pass") + seedLine(t, 12, "pass") + seedLine(t, 13, "pass"), SweepExitPass, "exit status 0", []string{"1 of its 3"}},
		{"another scenario's seeds", strings.ReplaceAll(pass3, `"quota"`, `"periodic"`), SweepExitPass, "exit status 0", []string{"0 of its 3"}},
		{"exit 0 with a failed seed", oneFailed, SweepExitPass, "exit status 0", []string{"exited 0", "2 of its 3 seeds failed"}},
		{"exit 1 with every seed passed", pass3, SweepExitFail, "exit status 1", []string{"exited 1", "0 of its 3 seeds failed"}},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			lines, err := judgeSweepProcess([]byte(c.out), c.code, c.how, sc, 10, 3, rerun)
			require.Error(t, err)
			require.Nil(t, lines)
			for _, w := range append(c.want, "seeds 10..12", "rerun them: "+rerun) {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

// TestJudgedPrefixStopsAtTheFirstGap: an interrupted process's seeds
// count from the first up to the first it did not judge, and a last line
// cut short by its end is not read.
func TestJudgedPrefixStopsAtTheFirstGap(t *testing.T) {
	t.Parallel()
	whole := seedLine(t, 10, "pass") + seedLine(t, 11, "fail") + seedLine(t, 13, "pass")
	require.Len(t, judgedPrefix([]byte(whole), "quota", 10, 4), 2)
	cut := seedLine(t, 10, "pass") + strings.TrimSuffix(seedLine(t, 11, "pass"), "}\n")
	require.Len(t, judgedPrefix([]byte(cut), "quota", 10, 4), 1)
	require.Empty(t, judgedPrefix([]byte(seedLine(t, 10, "pass")), "periodic", 10, 4))
}

// A sweep that can be stopped times its grace on the clock it is given:
// without one it refuses to start rather than read the wall clock.
func TestProcessSweepWithAStopNeedsAClock(t *testing.T) {
	started := false
	err := ProcessSweep{Scenario: scenarios.Portfolio(), From: 1, Count: 1, Stop: make(chan struct{}),
		Command: func(uint64, int) []string { started = true; return []string{"true"} }}.Run(func(SeedLine) {})
	require.ErrorContains(t, err, "needs a Clock")
	require.False(t, started, "no process started")
}

package sim

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/scenarios"
)

// sweepSeeds is how many seeds of each scenario go test sweeps.
const sweepSeeds = 200

func sweep(t *testing.T, name string, count int) []Result {
	t.Helper()
	sc, err := scenarios.Get(name)
	require.NoError(t, err)
	var failed []Result
	Sweep(SweepConfig{Scenario: sc, From: 1, Count: count}, func(r Result) {
		if !r.Pass {
			failed = append(failed, r)
		}
	})
	for _, r := range failed {
		t.Errorf("seed %d: %s\n%s\nreproduce: %s", r.Seed, r.Summary(), strings.Join(r.Tail, "\n"), r.Command())
	}
	return failed
}

// TestPortfolioSweep runs the portfolio over 200 seeds with faults on.
func TestPortfolioSweep(t *testing.T) { sweep(t, "portfolio", sweepSeeds) }

// TestOtherScenariosSweep runs every other scenario over a shorter sweep
// (make sim SEEDS=10000 SCENARIO=name is the long one).
func TestOtherScenariosSweep(t *testing.T) {
	for _, name := range scenarios.Names() {
		if name == "portfolio" || name == "late-result" {
			continue
		}
		t.Run(name, func(t *testing.T) { sweep(t, name, 60) })
	}
}

// TestLateResultSweep runs the late-result exercise over 200 seeds with
// faults on, and checks that the story (a stalled claimant resumed after
// another worker took over, its late result refused) happens in most.
func TestLateResultSweep(t *testing.T) {
	sc, err := scenarios.Get("late-result")
	require.NoError(t, err)
	told := 0
	for seed := uint64(1); seed <= sweepSeeds; seed++ {
		w, err := newWorld(sc, seed, drawMix(source(seed, streamFaults)))
		require.NoError(t, err)
		w.close()
		r := Run(Config{Scenario: sc, Seed: seed, Trace: true})
		require.True(t, r.Pass, "seed %d: %s\n%s", seed, r.Summary(), strings.Join(r.Tail, "\n"))
		if lateRefused(r.Trace) {
			told++
		}
	}
	t.Logf("the late result was delivered and refused in %d of %d seeds", told, sweepSeeds)
	require.Greater(t, told, sweepSeeds/2, "the late-result story should happen in most seeds")
}

// lateRefused reports whether the trace shows the resumed claimant's late
// result refused: after the script resumed it, one of its reports names
// the old fence and a refusal.
func lateRefused(trace []string) bool {
	resumed := ""
	for _, line := range trace {
		if i := strings.Index(line, "resume_stalled: resumed "); i >= 0 {
			var worker string
			var fence int
			fmt.Sscanf(line[i+len("resume_stalled: resumed "):], "%s with its old fence %d", &worker, &fence)
			resumed = fmt.Sprintf("%s .* fence=%d ", worker, fence)
			continue
		}
		if strings.Contains(line, "late_complete: late completion") && strings.Contains(line, "refused") {
			return true
		}
		if resumed != "" && regexp.MustCompile(resumed).MatchString(line) &&
			(strings.Contains(line, "stale") || strings.Contains(line, "lease expired locally")) {
			return true
		}
	}
	return false
}

// TestSameSeedSameFingerprint runs seeds in separate processes under
// GOMAXPROCS 1 and 2 and in this one, and compares the fingerprints.
func TestSameSeedSameFingerprint(t *testing.T) {
	if os.Getenv("LEASEHOLD_SIM_CHILD") != "" {
		return
	}
	sc := scenarios.Portfolio()
	var want []string
	for seed := uint64(1); seed <= 3; seed++ {
		want = append(want, fmt.Sprintf("%d %s", seed, Run(Config{Scenario: sc, Seed: seed}).Fingerprint))
	}
	for _, procs := range []int{1, 2} {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestFingerprintChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "LEASEHOLD_SIM_CHILD=1", "GOMAXPROCS="+strconv.Itoa(procs))
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		var got []string
		for _, line := range strings.Split(string(out), "\n") {
			if rest, ok := strings.CutPrefix(line, "fingerprint "); ok {
				got = append(got, rest)
			}
		}
		require.Equal(t, want, got, "GOMAXPROCS=%d", procs)
	}
}

// TestFingerprintChild prints fingerprints for TestSameSeedSameFingerprint.
func TestFingerprintChild(t *testing.T) {
	if os.Getenv("LEASEHOLD_SIM_CHILD") == "" {
		t.Skip("run by TestSameSeedSameFingerprint")
	}
	sc := scenarios.Portfolio()
	for seed := uint64(1); seed <= 3; seed++ {
		fmt.Printf("fingerprint %d %s\n", seed, Run(Config{Scenario: sc, Seed: seed}).Fingerprint)
	}
}

// TestRunTwiceSameTrace checks determinism in one process, line by line.
func TestRunTwiceSameTrace(t *testing.T) {
	sc := scenarios.Portfolio()
	a := Run(Config{Scenario: sc, Seed: 42, Trace: true})
	b := Run(Config{Scenario: sc, Seed: 42, Trace: true})
	require.Equal(t, a.Trace, b.Trace)
	require.Equal(t, a.Fingerprint, b.Fingerprint)
	require.Len(t, a.Fingerprint, 64)
}

// TestEventStringsParse checks that every generated event reads back.
func TestEventStringsParse(t *testing.T) {
	for _, e := range Generate(scenarios.Portfolio(), 7, DefaultMix("plain")) {
		back, err := ParseEvent(e.String())
		require.NoError(t, err, e.String())
		require.Equal(t, e, back)
	}
}

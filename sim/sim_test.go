package sim

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/worker"
)

// sweepSeeds is how many seeds of each scenario go test sweeps.
const sweepSeeds = 200

// TestScenarioSweeps runs every scenario over 200 seeds with faults on
// (make sim SEEDS=10000 SCENARIO=name is the long one), the scenarios in
// parallel: every seed must pass, and every cell of the coverage map the
// scenario declares must be reached by some seed. In the late-result
// exercise the story itself (a stalled claimant resumed after another
// worker took over, its late result refused) must happen in most seeds.
func TestScenarioSweeps(t *testing.T) {
	for _, name := range scenarios.Names() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sc, err := scenarios.Get(name)
			require.NoError(t, err)
			var cov Coverage
			told := 0
			Sweep(SweepConfig{Scenario: sc, From: 1, Count: sweepSeeds, Parallel: 1}, func(r Result) {
				cov.Add(r.Coverage)
				if r.Stats.LateRefused > 0 {
					told++
				}
				if !r.Pass {
					t.Errorf("seed %d: %s\n%s\nreproduce: %s", r.Seed, r.Summary(), strings.Join(r.Tail, "\n"), r.Command())
				}
			})
			require.Equal(t, sweepSeeds, cov.Seeds)
			require.True(t, cov.Enforced())
			require.Empty(t, cov.Missing(sc), "declared cells no seed reached:\n%s", cov.Table(sc))
			if name == "late-result" {
				t.Logf("the late result was delivered and refused in %d of %d seeds", told, sweepSeeds)
				require.Greater(t, told, sweepSeeds/2, "the late-result story should happen in most seeds")
			}
		})
	}
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
	kinds := map[EventKind]bool{}
	for _, name := range scenarios.Names() {
		sc, err := scenarios.Get(name)
		require.NoError(t, err)
		for seed := uint64(1); seed <= 3; seed++ {
			for _, e := range Generate(sc, seed, DefaultMix("plain")) {
				back, err := ParseEvent(e.String())
				require.NoError(t, err, e.String())
				require.Equal(t, e, back)
				kinds[e.Kind] = true
			}
		}
	}
	for _, k := range []EventKind{EvStep, EvAdvance, EvReap, EvTick, EvScript, EvCrash, EvRestart, EvStall, EvResume,
		EvStorageDown, EvStorageFault, EvDuplicate, EvHold, EvRedeliver, EvLoseResponse, EvCrashAfterCall, EvRestartSched,
		EvAdvanceTo, EvShutdown, EvCareless, EvLimit, EvLimitsRestore} {
		require.True(t, kinds[k], "no scenario's seeds 1-3 generate %s: the round trip does not cover it", k)
	}
	for _, bad := range []string{"storage_fault", "storage_fault melt", "step", "step x1", "advance 5", "tick now", "warp w1",
		"advance_to", "advance_to noon", "advance_to deadline-", "advance_to deadline-0ms", "advance_to run_at-5", "limit",
		"limit speed", "careless now", "shutdown", "limits_restore all"} {
		_, err := ParseEvent(bad)
		require.Error(t, err, bad)
	}
}

// An operation applied twice is caught at the event that applied it, even
// when that event committed nothing to the queue (its write failed).
func TestAppliedTwiceCaughtWithoutACommit(t *testing.T) {
	mix := DefaultMix(worker.Plain)
	w, err := newWorld(scenarios.Portfolio(), 1, mix, worldOptions{})
	require.NoError(t, err)
	defer w.close()
	require.Nil(t, w.checker.check())
	call := worker.Call{TaskID: "t_0123456789abcdef", OpID: "t_0123456789abcdef.s0", Fence: 1, Effect: "charge"}
	for range 2 {
		_, err := w.service.Call(w.ctx, call)
		require.NoError(t, err)
	}
	v := w.checker.check()
	require.NotNil(t, v)
	require.Equal(t, InvAppliedOnce, v.Invariant, v.Error())
}

// Replaying event indices outside the seed's schedule is refused, not
// silently skipped (a shrink would otherwise name the wrong events).
func TestKeepOutsideTheScheduleIsAnAnomaly(t *testing.T) {
	r := Run(Config{Scenario: scenarios.LateResult(), Seed: 1, Keep: []int{0, 100000}})
	require.False(t, r.Pass)
	require.Len(t, r.Anomalies, 1)
	require.Contains(t, r.Anomalies[0], "event index 100000 is outside the schedule")
}

// Every fault floor a scenario sets names a rate of the mix: a misspelt
// floor would otherwise be ignored.
func TestFaultFloorsNameRates(t *testing.T) {
	var m FaultMix
	known := map[string]bool{}
	for _, r := range m.rates() {
		known[r.name] = true
	}
	for _, name := range scenarios.Names() {
		sc, err := scenarios.Get(name)
		require.NoError(t, err)
		for floor := range sc.FaultFloors {
			require.True(t, known[floor], "scenario %s: floor %q names no fault rate", name, floor)
		}
	}
	require.Equal(t, "service=plain crash=8 stall=8 storage_down=6 storage_fault=12 duplicate=15 lose_response=10 crash_after_call=6 "+
		"shutdown=6 boundary=15 careless=10 limits=6 batch=10 follow=10 prune=6 group=10 (per mille)",
		DefaultMix(worker.Plain).String())
}

// The careless client leaves a task whose caller waits to cancel it under
// a worker's claim and crash that worker to the workers. Run by the
// client, the task's thirty long steps went by in a few bursts of writes
// and it completed before its caller ever found a worker holding it
// (boundaries seeds 903, 2843, 4425, 5169, 5962 and 8734 ended that way
// before schedules had run events); in these seeds the client claims the
// task while its caller still waits, and the story is told all the same.
func TestCarelessLeavesCancelThenCrashToWorkers(t *testing.T) {
	for _, seed := range []uint64{4, 8, 9, 10, 13, 14} {
		r := Run(Config{Scenario: scenarios.Boundaries(), Seed: seed, Trace: true})
		require.True(t, r.Pass, "seed %d: %s", seed, r.Summary())
		trace := strings.Join(r.Trace, "\n")
		require.Contains(t, trace, "its caller waits on a worker's claim: released to queued", "seed %d", seed)
		require.Regexp(t, `cancel-crash cancel_then_crash: cancellation requested, then w\d crashed`, trace, "seed %d", seed)
	}
}

// A sweep told to stop starts no further seed and hands over the seeds
// judged, in order from the first: none when stopped before it began;
// those finished (the one whose result closed it, and those already
// running) when stopped from each, far fewer than the sweep's.
func TestSweepStops(t *testing.T) {
	sc := scenarios.LateResult()
	stop := make(chan struct{})
	close(stop)
	called := 0
	require.Equal(t, 0, Sweep(SweepConfig{Scenario: sc, From: 1, Count: 50, Parallel: 2, Stop: stop}, func(Result) { called++ }))
	require.Equal(t, 0, called)

	const count = 1000
	stop = make(chan struct{})
	var seeds []uint64
	judged := Sweep(SweepConfig{Scenario: sc, From: 7, Count: count, Parallel: 2, Stop: stop}, func(r Result) {
		seeds = append(seeds, r.Seed)
		if len(seeds) == 3 {
			close(stop)
		}
	})
	require.Equal(t, len(seeds), judged)
	require.GreaterOrEqual(t, judged, 3)
	require.Less(t, judged, count/10, "the sweep stopped")
	for i, s := range seeds {
		require.Equal(t, uint64(7+i), s)
	}
	require.Equal(t, 5, Sweep(SweepConfig{Scenario: sc, From: 1, Count: 5, Parallel: 2}, func(Result) {}))
}

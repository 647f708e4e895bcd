package sim

import (
	"os"
	"runtime/debug"
	"strconv"
	"testing"

	"github.com/leasehold/leasehold/scenarios"
)

// benchSweepSeedsEnv sets how many seeds BenchmarkSimSweep runs;
// benchSweepMixEnv, set to "default", runs each with every fault kind on
// at DefaultMix's rates (benchConfig) instead of the mix it draws, so
// that builds whose scenarios draw differently run the same mix.
const (
	benchSweepSeedsEnv = "LEASEHOLD_SIM_BENCH_SEEDS"
	benchSweepMixEnv   = "LEASEHOLD_SIM_BENCH_MIX"
)

// BenchmarkSimSweep runs portfolio seeds 1 to LEASEHOLD_SIM_BENCH_SEEDS
// (default 200) as a sweep draws them (each seed's own mix, the oracle
// on), one after another in this goroutine, and reports seeds and
// schedule events per second and the events run: the figures a profile
// of the sweep (-cpuprofile) is read against (docs/PERF.md). It runs
// with the collector's target a sweep process has (SweepGCPercent)
// unless GOGC is set. It fails when a seed fails.
func BenchmarkSimSweep(b *testing.B) {
	if os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(SweepGCPercent))
	}
	seeds := 200
	if v, err := strconv.Atoi(os.Getenv(benchSweepSeedsEnv)); err == nil && v > 0 {
		seeds = v
	}
	sc := scenarios.Portfolio()
	for b.Loop() {
		events := 0
		wall := lap(b, func() {
			for seed := uint64(1); seed <= uint64(seeds); seed++ {
				cfg := Config{Scenario: sc, Seed: seed}
				if os.Getenv(benchSweepMixEnv) == "default" {
					cfg = benchConfig(sc, seed)
				}
				r := Run(cfg)
				if !r.Pass {
					b.Fatalf("seed %d: %s", seed, r.Summary())
				}
				events += r.Events
			}
		})
		b.ReportMetric(float64(seeds)/wall.Seconds(), "seeds/s")
		b.ReportMetric(float64(events)/wall.Seconds(), "events/s")
		b.ReportMetric(float64(events), "events")
	}
}

package sim

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/scenarios"
)

// The simulator's speed, as `make bench` reports it: seeds per second of
// the portfolio with every fault kind on (DefaultMix, under the service
// kind each seed draws), on one core and as a sweep split over two
// processes, and simulated seconds per wall second. Wall time comes from the
// benchmark's timer, never from inside the simulator.

const (
	// benchSeeds is how many seeds each figure runs.
	benchSeeds = 400
	// sweepTarget is the target: 10,000 portfolio seeds in 120 s on
	// two cores.
	sweepTarget = 10000.0 / 120
	// benchChildEnv makes the test binary run seeds FROM,COUNT and print
	// how many passed and the simulated time, as one process of a sweep.
	benchChildEnv = "LEASEHOLD_SIM_BENCH_CHILD"
)

// benchConfig is seed's run with every fault on.
func benchConfig(sc scenarios.Scenario, seed uint64) Config {
	mix := DefaultMix(MixFor(sc, seed).ServiceKind)
	return Config{Scenario: sc, Seed: seed, Mix: &mix}
}

// runSeeds runs count seeds from from and returns how many passed and the
// simulated time they covered.
func runSeeds(sc scenarios.Scenario, from uint64, count int) (passed int, simulated time.Duration) {
	for seed := from; seed < from+uint64(count); seed++ {
		r := Run(benchConfig(sc, seed))
		if r.Pass {
			passed++
		}
		simulated += r.Simulated
	}
	return passed, simulated
}

// TestMain runs a sweep process's share when the benchmark asks for one.
func TestMain(m *testing.M) {
	if spec := os.Getenv(benchChildEnv); spec != "" {
		os.Exit(benchChild(spec))
	}
	os.Exit(m.Run())
}

func benchChild(spec string) int {
	from, count, ok := strings.Cut(spec, ",")
	f, err1 := strconv.ParseUint(from, 10, 64)
	n, err2 := strconv.Atoi(count)
	if !ok || err1 != nil || err2 != nil {
		fmt.Fprintf(os.Stderr, "%s: want FROM,COUNT, got %q\n", benchChildEnv, spec)
		return 2
	}
	sc, err := scenarios.Get("portfolio")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	passed, simulated := runSeeds(sc, f, n)
	fmt.Printf("%d %d\n", passed, simulated)
	return 0
}

// lap returns how long fn took by the benchmark's own timer (b.Elapsed),
// which must be running: the simulator's package reads no wall clock.
func lap(b *testing.B, fn func()) time.Duration {
	before := b.Elapsed()
	fn()
	return b.Elapsed() - before
}

// BenchmarkSimPortfolio reports the simulator's speed: one core is
// GOMAXPROCS=1 in this process, the sweep two child processes in the
// environment the CLI gives its sweep processes (SweepProcessEnv). It fails
// when a seed fails; the sweep target is printed with the figures, met or
// not, since it depends on the machine as well as on the code. Each sub-benchmark runs its seeds once, whatever b.N: its
// figures are the custom metrics, not ns/op.
func BenchmarkSimPortfolio(b *testing.B) {
	sc, err := scenarios.Get("portfolio")
	if err != nil {
		b.Fatal(err)
	}
	runSeeds(sc, 1_000_000, 20) // warm up: the template image, code paths

	b.Run("one-core", func(b *testing.B) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))              // the collector too stays on this core
		defer debug.SetGCPercent(debug.SetGCPercent(SweepGCPercent)) // as a sweep process runs
		var passed int
		var simulated time.Duration
		wall := lap(b, func() { passed, simulated = runSeeds(sc, 1, benchSeeds) })
		if passed != benchSeeds {
			b.Errorf("%d of %d seeds failed", benchSeeds-passed, benchSeeds)
		}
		rate := float64(benchSeeds) / wall.Seconds()
		b.ReportMetric(rate, "seeds/s")
		b.ReportMetric(simulated.Seconds()/wall.Seconds(), "sim-s/s")
		b.Logf("portfolio, all faults on, one core: %d seeds in %.2fs = %.1f seeds/s (%.1f ms/seed); %.0f simulated seconds per wall second",
			benchSeeds, wall.Seconds(), rate, 1000*wall.Seconds()/benchSeeds, simulated.Seconds()/wall.Seconds())
	})

	b.Run("two-process-sweep", func(b *testing.B) {
		self, err := os.Executable()
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		const procs = 2
		var cmds []*exec.Cmd
		var outs []*strings.Builder
		for i := range procs {
			n := benchSeeds / procs
			cmd := exec.Command(self)
			cmd.Env = SweepProcessEnv(append(os.Environ(), fmt.Sprintf("%s=%d,%d", benchChildEnv, 1+i*n, n))) // as the CLI's sweep processes
			out := &strings.Builder{}
			cmd.Stdout, cmd.Stderr = out, os.Stderr
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			cmds, outs = append(cmds, cmd), append(outs, out)
		}
		passed, simulated := 0, time.Duration(0)
		for i, cmd := range cmds {
			if err := cmd.Wait(); err != nil {
				b.Fatalf("sweep process %d: %v", i, err)
			}
			sc := bufio.NewScanner(strings.NewReader(outs[i].String()))
			var p int
			var s int64
			if !sc.Scan() {
				b.Fatalf("sweep process %d printed nothing", i)
			}
			if _, err := fmt.Sscanf(sc.Text(), "%d %d", &p, &s); err != nil {
				b.Fatalf("sweep process %d: %q: %v", i, sc.Text(), err)
			}
			passed, simulated = passed+p, simulated+time.Duration(s)
		}
		wall := b.Elapsed()
		if passed != benchSeeds {
			b.Errorf("%d of %d seeds failed", benchSeeds-passed, benchSeeds)
		}
		rate := float64(benchSeeds) / wall.Seconds()
		b.ReportMetric(rate, "seeds/s")
		b.ReportMetric(simulated.Seconds()/wall.Seconds(), "sim-s/s")
		met := "met"
		if rate < sweepTarget {
			met = "NOT met"
		}
		b.Logf("portfolio, all faults on, %d processes: %d seeds in %.2fs = %.1f seeds/s; 10,000 seeds would take %.0fs (target 120s, %.1f seeds/s: %s); %.0f simulated seconds per wall second",
			procs, benchSeeds, wall.Seconds(), rate, 10000/rate, sweepTarget, met, simulated.Seconds()/wall.Seconds())
	})
}

// oracleRatioTarget is the slowest the oracle may make the simulator:
// seeds/s with the reference in lockstep over seeds/s without it.
const oracleRatioTarget = 0.75

// BenchmarkSimOracle reports what the lockstep oracle costs: portfolio
// seeds per second with it on and off, on one core in the same run,
// alternating small blocks of seeds (each block run both ways, in turns
// first) so that a busy machine slows both alike, and their ratio. It
// fails when the ratio is below oracleRatioTarget or a seed fails.
func BenchmarkSimOracle(b *testing.B) {
	sc, err := scenarios.Get("portfolio")
	if err != nil {
		b.Fatal(err)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1)) // as the one-core figure: the collector stays on this core
	defer debug.SetGCPercent(debug.SetGCPercent(SweepGCPercent))
	const blocks, perBlock = 40, benchSeeds / 40 / 2
	run := func(from uint64, noOracle bool) (passed int) {
		for seed := from; seed < from+perBlock; seed++ {
			cfg := benchConfig(sc, seed)
			cfg.NoOracle = noOracle
			if Run(cfg).Pass {
				passed++
			}
		}
		return passed
	}
	run(1_000_000, false) // warm up
	var on, off time.Duration
	passed := 0
	for i := range blocks {
		from := uint64(1 + i*perBlock)
		first, second := false, true
		if i%2 == 1 {
			first, second = true, false
		}
		for _, noOracle := range []bool{first, second} {
			var p int
			d := lap(b, func() { p = run(from, noOracle) })
			passed += p
			if noOracle {
				off += d
			} else {
				on += d
			}
		}
	}
	seeds := blocks * perBlock
	if passed != 2*seeds {
		b.Errorf("%d of %d runs failed", 2*seeds-passed, 2*seeds)
	}
	rateOn, rateOff := float64(seeds)/on.Seconds(), float64(seeds)/off.Seconds()
	ratio := rateOn / rateOff
	b.ReportMetric(rateOn, "seeds/s-oracle-on")
	b.ReportMetric(rateOff, "seeds/s-oracle-off")
	b.ReportMetric(ratio, "on/off")
	b.Logf("portfolio, all faults on: oracle on %.1f seeds/s, off %.1f seeds/s, ratio %.2f (target %.2f)", rateOn, rateOff, ratio, oracleRatioTarget)
	if ratio < oracleRatioTarget {
		b.Errorf("the oracle runs at %.2f of the speed without it, below the target %.2f", ratio, oracleRatioTarget)
	}
}

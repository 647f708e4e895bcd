package sim

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/leasehold/leasehold/scenarios"
)

// SweepConfig runs seeds From to From+Count-1 of a scenario.
type SweepConfig struct {
	Scenario scenarios.Scenario
	From     uint64
	Count    int
	// Parallel is how many seeds run at once (default GOMAXPROCS). Each
	// seed is its own world, so results do not depend on it.
	Parallel int
	Mix      *FaultMix
	// Stop, once closed, ends the sweep early: no seed starts after it,
	// the seeds running finish, and each sees the results of the seeds
	// before the first one not run. Nil runs every seed.
	Stop <-chan struct{}
	// Timelines records each seed's timeline (Config.Timeline). The first
	// seed's and every failed seed's are kept in their results; a later
	// passing seed's is dropped, to keep long sweeps small.
	Timelines bool
	// Store is the database every seed's world runs on (each PostgreSQL
	// world in a schema of its own); zero: SQLite in memory.
	Store Store
}

// Sweep runs every seed of the sweep and calls each with the results in
// seed order, whatever order they finished in. Passing runs drop their
// schedule and trace tail before each sees them, to keep long sweeps small.
// It returns how many seeds each saw: cfg.Count, unless cfg.Stop ended the
// sweep early.
func Sweep(cfg SweepConfig, each func(Result)) (judged int) {
	parallel := cfg.Parallel
	if parallel <= 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	type slot struct {
		done chan struct{}
		res  Result
	}
	slots := make([]*slot, cfg.Count)
	for i := range slots {
		slots[i] = &slot{done: make(chan struct{})}
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for p := 0; p < parallel; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				select {
				case <-cfg.Stop:
					continue // stopped: handed out, never run
				default:
				}
				r := Run(Config{Scenario: cfg.Scenario, Seed: cfg.From + uint64(i), Mix: cfg.Mix, Timeline: cfg.Timelines, Store: cfg.Store})
				if r.Pass {
					r.Schedule, r.Tail = nil, nil
					if i > 0 {
						r.Timeline = nil
					}
				}
				slots[i].res = r
				close(slots[i].done)
			}
		}()
	}
	go func() {
		defer close(next)
		for i := range slots {
			select {
			case next <- i:
			case <-cfg.Stop:
				return
			}
		}
	}()
	finished := make(chan struct{}) // every seed handed out has been run
	go func() {
		wg.Wait()
		close(finished)
	}()
	for _, s := range slots {
		select {
		case <-s.done:
		case <-finished:
			select {
			case <-s.done:
			default:
				return judged // stopped: this seed never started
			}
		}
		each(s.res)
		s.res = Result{}
		judged++
	}
	<-finished
	return judged
}

// SweepGCPercent is the collector's target (GOGC) for a process that runs
// seeds one after another. Each seed's world is garbage as soon as it is
// judged, so a higher target costs a few tens of megabytes, not a growing
// heap: over three 700-seed portfolio runs at 400, a process peaked at
// 46 MB resident (28 MB at the default 100) and took 17% less time.
const SweepGCPercent = 400

// SweepProcessEnv returns the environment for one process of a sweep split
// across processes, from environ (the parent's): one core each
// (GOMAXPROCS=1, so its collector does not contend with the other
// processes for the cores), SQLite single-threaded (SerialSQLiteEnv: the
// process runs its worlds one at a time) and GOGC=SweepGCPercent unless
// environ sets GOGC.
func SweepProcessEnv(environ []string) []string {
	env := append(slices.Clone(environ), "GOMAXPROCS=1", SerialSQLiteEnv+"=1")
	if !slices.ContainsFunc(environ, func(kv string) bool { return strings.HasPrefix(kv, "GOGC=") }) {
		env = append(env, fmt.Sprintf("GOGC=%d", SweepGCPercent))
	}
	return env
}

package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"strings"
	"time"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/scenarios"
)

// Bounds on a run. Hitting one is a reported failure, never a silent stop.
const (
	livenessSimulatedMax  = 30 * time.Minute
	livenessRoundsMax     = 20_000
	stepsPerRoundMax      = 64
	operatorRecoveriesMax = 3
	traceTailLines        = 40
)

// Config says what to run.
type Config struct {
	Scenario scenarios.Scenario
	Seed     uint64
	// Mix overrides the fault mix the seed would draw.
	Mix *FaultMix
	// Events overrides the generated schedule (rapid draws schedules
	// directly; shrinking replays subsets).
	Events []Event
	// Keep, when set, runs only these indices of the generated schedule.
	Keep []int
	// Trace keeps every trace line in the result.
	Trace bool
	// Timeline keeps a structured timeline of the run in the result.
	Timeline bool
	// Only, when set (tests only), switches off every check it does not
	// name (invariants and oracle comparisons by their Violation names),
	// and with them the liveness, expectation and anomaly verdicts, so a
	// test can show which check catches a bug.
	Only []string
	// Store is the database the world runs on; zero: SQLite in memory.
	Store Store
	// NoOracle (tests and benchmarks only) runs the world without the
	// reference model in lockstep and without the invariants stated over
	// it.
	NoOracle bool
}

// Result is the outcome of one run.
type Result struct {
	Seed        uint64
	Scenario    string
	Store       string // the store the world ran on: StoreSQLite or StorePostgres
	Mix         FaultMix
	Fingerprint string // SHA-256 of the trace
	Pass        bool
	// Violation is the first safety invariant broken, at event index At.
	Violation *model.Violation
	At        int
	// Liveness describes a run that did not settle once faults healed.
	Liveness string
	// Expectations lists the scenario outcomes that were not met.
	Expectations []string
	Anomalies    []string
	Events       int           // schedule events applied
	Rounds       int           // liveness rounds
	Simulated    time.Duration // simulated time elapsed
	Schedule     []Event
	Trace        []string // every line, when Config.Trace
	Tail         []string // the lines leading to the end (or the failure)
	Stats        Stats
	Timeline     []TimelineEntry // when Config.Timeline
	Workers      int
	// Coverage is the run's coverage map (Seeds 1).
	Coverage Coverage
	// Outcomes lists how each task the queue held at the end ended, as
	// "ID state reason" in ID order; FusedFaults counts the storage faults
	// that landed on a statement PostgreSQL runs fused (pgfused.go), after
	// which a seed's run on PostgreSQL may part from its run on SQLite.
	Outcomes    []string
	FusedFaults int
}

// Stats counts what a run exercised.
type Stats struct {
	Applied       int // operations applied by the effect service
	Calls         int // calls the effect service received
	StaleWrites   int64
	LeaseExpiries int64
	Retries       int64
	Reviews       int64
	// LateRefused counts stalled claimants whose late result was refused.
	LateRefused int
}

// Broken returns the name of what failed: the invariant, "liveness",
// "expectation" or "anomaly"; empty when the run passed.
func (r Result) Broken() string {
	switch {
	case r.Violation != nil:
		return r.Violation.Invariant
	case r.Liveness != "":
		return "liveness"
	case len(r.Anomalies) > 0:
		return "anomaly"
	case len(r.Expectations) > 0:
		return "expectation"
	}
	return ""
}

// tracer hashes trace lines as they are written and keeps the tail.
type tracer struct {
	h    hash.Hash
	all  []string
	keep bool
	tail []string
	buf  []byte // the line being hashed, reused from line to line
}

func (t *tracer) line(s string) {
	t.buf = append(append(t.buf[:0], s...), '\n')
	t.h.Write(t.buf)
	if t.keep {
		t.all = append(t.all, s)
	}
	t.tail = append(t.tail, s)
	if len(t.tail) > traceTailLines {
		t.tail = t.tail[1:]
	}
}

// Run executes one seed of a scenario: the schedule with faults, checking
// the invariants after every event; then, faults healed, the liveness
// phase; then the scenario's expectations.
func Run(cfg Config) (res Result) {
	sc := cfg.Scenario
	mix := MixFor(sc, cfg.Seed)
	if cfg.Mix != nil {
		mix = *cfg.Mix
	}
	events := cfg.Events
	if events == nil {
		events = Generate(sc, cfg.Seed, mix)
	}
	res = Result{Seed: cfg.Seed, Scenario: sc.Name, Store: cfg.Store.Name(), Mix: mix}
	if cfg.Keep != nil {
		kept, anomaly := keepEvents(events, cfg.Keep)
		if anomaly != "" {
			res.Anomalies = append(res.Anomalies, anomaly)
			return res
		}
		events = kept
	}
	res.Schedule = events
	tr := &tracer{h: sha256.New(), keep: cfg.Trace}
	defer func() {
		res.Fingerprint = hex.EncodeToString(tr.h.Sum(nil))
		res.Trace, res.Tail = tr.all, tr.tail
		res.Pass = res.Broken() == ""
	}()
	tr.line(fmt.Sprintf("seed %d scenario %s", cfg.Seed, sc.Name))
	tr.line("faults: " + mix.String())
	w, err := newWorld(sc, cfg.Seed, mix, worldOptions{noOracle: cfg.NoOracle, only: cfg.Only, store: cfg.Store})
	if err != nil {
		res.Anomalies = append(res.Anomalies, err.Error())
		return res
	}
	defer func() {
		if err := w.close(); err != nil {
			res.Anomalies = append(res.Anomalies, err.Error())
		}
	}()
	w.recordTimeline = cfg.Timeline
	res.Workers = sc.Workers
	defer func() {
		res.Simulated, res.Stats = w.clock.Since(Epoch), w.stats()
		res.Outcomes, res.FusedFaults = w.outcomes(), w.fusedFaults()
		var err error
		if res.Coverage, err = w.coverage(); err != nil {
			res.Anomalies = append(res.Anomalies, err.Error())
		}
		if res.Violation != nil {
			w.timelineAdd(TimelineEntry{Kind: TimelineViolation, TaskID: res.Violation.TaskID, Detail: res.Violation.Error()})
		}
		res.Timeline = w.timeline
	}()

	if !w.play(events, tr, cfg, &res) {
		return res
	}
	w.finish(len(events), tr, cfg, &res)
	return res
}

// keepEvents returns the events at the indices keep names, in keep's
// order, or an anomaly naming the first index outside events.
func keepEvents(events []Event, keep []int) ([]Event, string) {
	kept := make([]Event, 0, len(keep))
	for _, i := range keep {
		if i < 0 || i >= len(events) {
			return nil, fmt.Sprintf("event index %d is outside the schedule (%d events)", i, len(events))
		}
		kept = append(kept, events[i])
	}
	return kept, ""
}

// play applies the schedule's events in turn, tracing each and checking
// the invariants after every one. It returns false when the run ends
// there, res saying why: a violation, or an anomaly (unless cfg.Only
// limits the run to some invariants).
func (w *World) play(events []Event, tr *tracer, cfg Config, res *Result) bool {
	for i, e := range events {
		w.timelineFault(e)
		out := w.applyCovered(e)
		tr.line(fmt.Sprintf("%d +%dms %s: %s", i, w.clock.Since(Epoch).Milliseconds(), e, out))
		res.Events++
		if v := w.checker.check(); v != nil {
			res.Violation, res.At = v, i
			tr.line("VIOLATION " + v.Error())
			return false
		}
		if len(w.anomalies) > 0 && cfg.Only == nil {
			res.Anomalies = w.anomalies
			return false
		}
	}
	return true
}

// timelineFault adds e to the timeline, when the run records one, if e is
// a fault: any event but a step, a run's start or end, an advance, a reap,
// a tick or a script.
func (w *World) timelineFault(e Event) {
	if !w.recordTimeline || e.Kind == EvStep || e.Kind == EvRunStart || e.Kind == EvRunEnd || e.Kind == EvAdvance ||
		e.Kind == EvReap || e.Kind == EvTick || e.Kind == EvScript {
		return
	}
	entry := TimelineEntry{Kind: TimelineFault, Detail: e.String(), Event: e.Kind}
	if e.Kind == EvStorageDown {
		entry.DurationMs = e.Delay.Milliseconds()
	}
	if e.Kind.onWorker() {
		entry.Worker = workerName(e.Worker)
	}
	w.timelineAdd(entry)
}

// finish runs the rest of a run whose n scheduled events all passed: the
// liveness phase with faults healed, the final invariants, then the
// scenario's expectations and the verdict, all into res and the trace.
func (w *World) finish(n int, tr *tracer, cfg Config, res *Result) {
	rounds, liveness, v := w.liveness(tr)
	res.Rounds = rounds
	if v != nil {
		res.Violation, res.At = v, n+rounds
		tr.line("VIOLATION " + v.Error())
		return
	}
	if cfg.Only == nil {
		res.Anomalies = w.anomalies
	}
	if liveness != "" && cfg.Only == nil {
		res.Liveness = liveness
		tr.line("LIVENESS " + liveness)
		return
	}
	if v := w.checker.final(); v != nil {
		res.Violation, res.At = v, n+rounds
		tr.line("VIOLATION " + v.Error())
		return
	}
	if cfg.Only == nil {
		res.Expectations = w.expectations()
	}
	for _, e := range res.Expectations {
		tr.line("EXPECTATION " + e)
	}
	tr.line("verdict: " + map[bool]string{true: "pass", false: "fail"}[len(res.Expectations) == 0 && len(res.Anomalies) == 0])
}

// stats reads what the run exercised.
func (w *World) stats() Stats {
	s := Stats{Applied: len(w.service.AppliedOps()), Calls: w.service.CallCount()}
	for _, t := range w.tasks {
		if t.lateSeen {
			s.LateRefused++
		}
	}
	var m model.Metrics
	var err error
	w.storage.Bypass(func() { m, err = w.q.Metrics(w.ctx) })
	if err == nil {
		s.StaleWrites, s.LeaseExpiries, s.Retries, s.Reviews = m.StaleWrites, m.LeaseExpiries, m.Retries, m.Reviews
	}
	return s
}

// Command returns the command line that reproduces the run.
func (r Result) Command() string {
	if r.Store == StorePostgres {
		return fmt.Sprintf("make sim SEED=%d SCENARIO=%s STORE=postgres", r.Seed, r.Scenario)
	}
	return fmt.Sprintf("make sim SEED=%d SCENARIO=%s", r.Seed, r.Scenario)
}

// Summary is a one-line description of a failed run.
func (r Result) Summary() string {
	switch {
	case r.Violation != nil:
		return fmt.Sprintf("invariant %s broken at event %d: %s", r.Violation.Invariant, r.At, r.Violation.Error())
	case r.Liveness != "":
		return "liveness: " + r.Liveness
	case len(r.Anomalies) > 0:
		return "anomaly: " + strings.Join(r.Anomalies, "; ")
	case len(r.Expectations) > 0:
		return "expectations not met: " + strings.Join(r.Expectations, "; ")
	}
	return "pass"
}

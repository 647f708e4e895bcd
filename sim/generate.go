package sim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/leasehold/leasehold/faults"
	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/worker"
)

// FaultMix says which faults a run injects and how often: each is the
// chance, per thousand scheduled events, that a fault of that kind is
// inserted before the event. ServiceKind is what the effect double runs as.
type FaultMix struct {
	ServiceKind    worker.ServiceKind
	Crash          int
	Stall          int
	StorageDown    int
	StorageFault   int
	Duplicate      int
	LoseResponse   int
	CrashAfterCall int
	// The world's other actors, drawn the same way: graceful shutdowns
	// (and restarts), clock advances onto a boundary (each followed by a
	// reap or a step), the careless client's bursts of writes, and the
	// operator's limit changes (and restores).
	Shutdown int
	Boundary int
	Careless int
	Limits   int
	// The batch caller's SubmitMany batches and the follower's reads of
	// the trail.
	Batch  int
	Follow int
	// The operator's prunes.
	Prune int
	// Group events: several actors' writes committed as one group
	// (world_groups.go), drawn from a stream of their own.
	Group int
	// Refill has the workers' slots claim their next task with the write
	// that completes their last, as the live runner's do (worker.Config's
	// Refill): drawn on in half the runs, so that both paths stay covered.
	Refill bool
}

// rate is one fault kind's rate in a mix, by the name traces, String and
// scenarios' floors use.
type rate struct {
	name string
	per  *int
}

// rates lists the mix's rates in their fixed order.
func (m *FaultMix) rates() []rate {
	return []rate{{"crash", &m.Crash}, {"stall", &m.Stall}, {"storage_down", &m.StorageDown}, {"storage_fault", &m.StorageFault},
		{"duplicate", &m.Duplicate}, {"lose_response", &m.LoseResponse}, {"crash_after_call", &m.CrashAfterCall},
		{"shutdown", &m.Shutdown}, {"boundary", &m.Boundary}, {"careless", &m.Careless}, {"limits", &m.Limits},
		{"batch", &m.Batch}, {"follow", &m.Follow}, {"prune", &m.Prune}, {"group", &m.Group}}
}

// String lists the service kind and every fault's rate, in a fixed order.
func (m FaultMix) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "service=%s", m.ServiceKind)
	for _, r := range m.rates() {
		fmt.Fprintf(&b, " %s=%d", r.name, *r.per)
	}
	b.WriteString(" (per mille)")
	if m.Refill {
		b.WriteString(" refill")
	}
	return b.String()
}

// DefaultMix turns every fault on at a moderate rate.
func DefaultMix(kind worker.ServiceKind) FaultMix {
	return FaultMix{ServiceKind: kind, Crash: 8, Stall: 8, StorageDown: 6, StorageFault: 12, Duplicate: 15,
		LoseResponse: 10, CrashAfterCall: 6, Shutdown: 6, Boundary: 15, Careless: 10, Limits: 6, Batch: 10, Follow: 10, Prune: 6, Group: 10}
}

// drawMix picks the run's fault mix from the mix stream (swarm
// testing): the service kind, then each fault kind on or off with even
// odds and, when on, a rate between 2 and 40 per mille. Different seeds
// stress different combinations, and a rare fault is sometimes frequent.
func drawMix(rng *rand.Rand) FaultMix {
	kinds := worker.ServiceKinds()
	m := FaultMix{ServiceKind: kinds[rng.IntN(len(kinds))]}
	for _, r := range m.rates() {
		if rng.IntN(2) == 1 {
			*r.per = 2 + rng.IntN(39)
		}
	}
	return m
}

// MixFor is the fault mix a seed draws for a scenario: its swarm mix with
// the scenario's floors applied.
func MixFor(sc scenarios.Scenario, seed uint64) FaultMix {
	m := drawMix(source(seed, streamMix))
	m.Refill = source(seed, streamRefill).IntN(2) == 1
	for _, r := range m.rates() {
		if floor := sc.FaultFloors[r.name]; *r.per < floor {
			*r.per = floor
		}
	}
	return m
}

// Generate builds a seed's schedule: the scenario's submits early, then
// worker steps, the beginnings and ends of the workers' step runs, clock
// advances, reaper runs, scripted caller actions and periodic ticks from
// the scheduler stream, with faults inserted from the faults stream
// according to mix.
func Generate(sc scenarios.Scenario, seed uint64, mix FaultMix) []Event {
	sched, faultRng, groupRng := source(seed, streamScheduler), source(seed, streamFaults), source(seed, streamGroups)
	var events []Event
	advances := []time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond,
		100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, sc.Lease + 100*time.Millisecond}
	for len(events) < sc.Events {
		events = append(events, drawFault(sc, mix, faultRng)...)
		if mix.Group > 0 && groupRng.IntN(1000) < mix.Group {
			events = append(events, drawGroup(sc, mix, groupRng))
		}
		r := sched.IntN(1000)
		switch {
		case r < 330:
			events = append(events, Event{Kind: EvStep, Worker: sched.IntN(sc.Workers)})
		case r < 470:
			events = append(events, Event{Kind: EvRunStart})
		case r < 610:
			events = append(events, Event{Kind: EvRunEnd})
		case r < 760:
			events = append(events, Event{Kind: EvAdvance, Delay: advances[sched.IntN(len(advances))]})
		case r < 800:
			events = append(events, Event{Kind: EvReap})
		case r < 830 && len(sc.Schedules) > 0:
			events = append(events, Event{Kind: EvTick})
		case r < 830:
			events = append(events, Event{Kind: EvStep, Worker: sched.IntN(sc.Workers)})
		case r < 840 && sc.Schedulers > 1:
			events = append(events, Event{Kind: EvRestartSched, Worker: sched.IntN(sc.Schedulers)})
		default:
			events = append(events, Event{Kind: EvScript, Task: sched.IntN(len(sc.Tasks))})
		}
	}
	return events
}

// drawFault decides, from the faults stream, whether a fault (or an act
// of the world's other actors) precedes the next scheduled event, and
// which: none, one event, or a short run of them.
func drawFault(sc scenarios.Scenario, mix FaultMix, rng *rand.Rand) []Event {
	one := func(make func() Event) func() []Event { return func() []Event { return []Event{make()} } }
	rates := []struct {
		rate int
		make func() []Event
	}{
		{mix.Crash, one(func() Event { return Event{Kind: EvCrash, Worker: rng.IntN(sc.Workers)} })},
		{mix.Crash, one(func() Event { return Event{Kind: EvRestart, Worker: rng.IntN(sc.Workers)} })},
		{mix.Stall, one(func() Event { return Event{Kind: EvStall, Worker: rng.IntN(sc.Workers)} })},
		{mix.Stall, one(func() Event { return Event{Kind: EvResume, Worker: rng.IntN(sc.Workers)} })},
		{mix.StorageDown, one(func() Event {
			return Event{Kind: EvStorageDown, Delay: time.Duration(100+rng.IntN(3000)) * time.Millisecond}
		})},
		{mix.StorageFault, one(func() Event {
			kinds := faults.StorageFaults()
			return Event{Kind: EvStorageFault, Fault: kinds[rng.IntN(len(kinds))]}
		})},
		{mix.Duplicate, one(func() Event { return Event{Kind: EvDuplicate, Worker: rng.IntN(sc.Workers)} })},
		{mix.Duplicate, one(func() Event { return Event{Kind: EvHold, Worker: rng.IntN(sc.Workers)} })},
		{mix.Duplicate, one(func() Event { return Event{Kind: EvRedeliver, Worker: rng.IntN(sc.Workers)} })},
		{mix.LoseResponse, one(func() Event { return Event{Kind: EvLoseResponse} })},
		{mix.CrashAfterCall, one(func() Event { return Event{Kind: EvCrashAfterCall, Worker: rng.IntN(sc.Workers)} })},
		{mix.Shutdown, one(func() Event { return Event{Kind: EvShutdown, Worker: rng.IntN(sc.Workers)} })},
		{mix.Shutdown, one(func() Event { return Event{Kind: EvRestart, Worker: rng.IntN(sc.Workers)} })},
		{mix.Boundary, func() []Event { return drawBoundary(sc, mix, rng) }},
		{mix.Careless, func() []Event {
			burst := make([]Event, 2+rng.IntN(4))
			for i := range burst {
				burst[i] = Event{Kind: EvCareless}
			}
			return burst
		}},
		{mix.Limits, one(func() Event {
			names := LimitNames()
			return Event{Kind: EvLimit, Name: names[rng.IntN(len(names))]}
		})},
		{mix.Limits, one(func() Event { return Event{Kind: EvLimitsRestore} })},
		{mix.Batch, one(func() Event {
			shapes := BatchShapes()
			return Event{Kind: EvBatch, Name: shapes[rng.IntN(len(shapes))]}
		})},
		{mix.Follow, one(func() Event { return Event{Kind: EvFollow} })},
		{mix.Prune, one(func() Event {
			names := PruneNames()
			return Event{Kind: EvPrune, Name: names[rng.IntN(len(names))]}
		})},
	}
	r := rng.IntN(1000)
	for _, f := range rates {
		if r < f.rate {
			return f.make()
		}
		r -= f.rate
	}
	return nil
}

// drawBoundary draws a clock advance onto a boundary (or 1 ms before it)
// and what happens at that instant: a reap or a worker's step; after an
// advance onto the careless client's own lease_until, in a run that has
// the client, its next write. A worker drops its claim by its own clock
// at lease_until and writes nothing; the careless client writes, so its
// write at exactly that instant is the one the queue's lease check must
// refuse (and its write 1 ms before, accept).
func drawBoundary(sc scenarios.Scenario, mix FaultMix, rng *rand.Rand) []Event {
	names := BoundaryNames()
	to := Event{Kind: EvAdvanceTo, Name: names[rng.IntN(len(names))]}
	if rng.IntN(2) == 1 {
		to.Delay = time.Millisecond
	}
	if to.Name == BoundaryCarelessLease && mix.Careless > 0 {
		return []Event{to, {Kind: EvCareless}}
	}
	then := Event{Kind: EvReap}
	if rng.IntN(3) > 0 {
		then = Event{Kind: EvStep, Worker: rng.IntN(sc.Workers)}
	}
	return []Event{to, then}
}

// FormatSchedule renders events one per line.
func FormatSchedule(events []Event) string {
	var b strings.Builder
	for _, e := range events {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	return b.String()
}

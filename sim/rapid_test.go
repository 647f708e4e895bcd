package sim

import (
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasehold/leasehold/faults"
	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/worker"
)

// drawEvent draws one schedule event for a scenario: worker steps, clock
// advances (including past a lease, and onto a boundary), reaper runs,
// ticks, scripted caller actions, every kind of fault, graceful
// shutdowns, the careless client and the operator's limit changes.
func drawEvent(sc scenarios.Scenario) *rapid.Generator[Event] {
	return rapid.Custom(func(t *rapid.T) Event {
		w := rapid.IntRange(0, sc.Workers-1)
		switch rapid.IntRange(0, 21).Draw(t, "kind") {
		case 0, 1, 2, 3, 4, 5:
			return Event{Kind: EvStep, Worker: w.Draw(t, "worker")}
		case 20:
			return Event{Kind: EvRunStart}
		case 21:
			return Event{Kind: EvRunEnd}
		case 6, 7:
			ms := rapid.SampledFrom([]int{10, 100, 500, int(sc.Lease.Milliseconds()) + 100}).Draw(t, "ms")
			return Event{Kind: EvAdvance, Delay: time.Duration(ms) * time.Millisecond}
		case 8:
			return Event{Kind: EvReap}
		case 9:
			return Event{Kind: EvScript, Task: rapid.IntRange(0, len(sc.Tasks)-1).Draw(t, "task")}
		case 10:
			return Event{Kind: rapid.SampledFrom([]EventKind{EvCrash, EvRestart, EvStall, EvResume, EvCrashAfterCall}).Draw(t, "process"),
				Worker: w.Draw(t, "worker")}
		case 11:
			return Event{Kind: rapid.SampledFrom([]EventKind{EvDuplicate, EvHold, EvRedeliver}).Draw(t, "delivery"), Worker: w.Draw(t, "worker")}
		case 12:
			return Event{Kind: EvStorageDown, Delay: time.Duration(rapid.IntRange(1, 30).Draw(t, "down")) * 100 * time.Millisecond}
		case 13:
			return Event{Kind: EvStorageFault, Fault: rapid.SampledFrom(faults.StorageFaults()).Draw(t, "fault")}
		case 14:
			return Event{Kind: EvLoseResponse}
		case 15:
			e := Event{Kind: EvAdvanceTo, Name: rapid.SampledFrom(BoundaryNames()).Draw(t, "boundary")}
			if rapid.Bool().Draw(t, "before") {
				e.Delay = time.Millisecond
			}
			return e
		case 16:
			return Event{Kind: rapid.SampledFrom([]EventKind{EvShutdown, EvRestart}).Draw(t, "shutdown"), Worker: w.Draw(t, "worker")}
		case 17:
			return Event{Kind: EvCareless}
		case 18:
			if rapid.Bool().Draw(t, "restore") {
				return Event{Kind: EvLimitsRestore}
			}
			return Event{Kind: EvLimit, Name: rapid.SampledFrom(LimitNames()).Draw(t, "limit")}
		}
		return Event{Kind: EvTick}
	})
}

// TestRapidSchedules lets rapid draw whole schedules (events and faults)
// and run them through the same world: no task may ever run under two valid
// claims, no operation may be applied twice, and every other invariant,
// liveness and expectation must hold. Failures shrink to a minimal
// schedule; one found should be kept as a named regression test (none has
// been found so far).
func TestRapidSchedules(t *testing.T) {
	for _, name := range []string{"portfolio", "late-result", "boundaries"} {
		sc, err := scenarios.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(name, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				kind := rapid.SampledFrom(worker.ServiceKinds()).Draw(t, "service")
				events := rapid.SliceOfN(drawEvent(sc), 1, 300).Draw(t, "events")
				mix := DefaultMix(kind)
				r := Run(Config{Scenario: sc, Seed: 1, Mix: &mix, Events: events})
				if !r.Pass {
					t.Fatalf("%s\nschedule:\n%s\ntail:\n%s", r.Summary(), FormatSchedule(events), strings.Join(r.Tail, "\n"))
				}
			})
		})
	}
}

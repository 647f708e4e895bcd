package evidence

import (
	"fmt"
	"sort"
	"strings"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/liverun"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/reports"
	"github.com/leasehold/leasehold/sim"
	"github.com/leasehold/leasehold/worker"
)

// timeline is the one builder of both kinds of timeline, simulated and
// live: claims open bars on a worker's lane and their ends close them,
// everything else is a mark or a shaded span, and finish closes what is
// still open and fixes the extent.
type timeline struct {
	t      reports.Timeline
	claims map[string]*reports.Bar // open claims by claimKey
	end    int64                   // the latest moment seen
}

func newTimeline(title string, kind reports.Kind, unit string, lanes []string) *timeline {
	return &timeline{t: reports.Timeline{Title: title, Kind: kind, Unit: unit, Lanes: lanes}, claims: map[string]*reports.Bar{}}
}

func claimKey(task string, fence int64) string { return fmt.Sprintf("%s/%d", task, fence) }

// seen moves the end of the timeline to at, if later.
func (b *timeline) seen(at int64) { b.end = max(b.end, at) }

// claim opens a bar for the claim of task under fence.
func (b *timeline) claim(lane string, at int64, task string, attempt int, fence int64, detail string) {
	b.claims[claimKey(task, fence)] = &reports.Bar{Lane: lane, Start: at, TaskID: task, Attempt: attempt, Fence: fence,
		Label: fmt.Sprintf("%s f%d", shortID(task), fence), Detail: detail}
}

// endClaim closes the bar of task's claim under fence at at, saying why,
// and returns its lane ("" and false when no such claim is open).
func (b *timeline) endClaim(task string, fence int64, at int64, why string) (string, bool) {
	k := claimKey(task, fence)
	bar, ok := b.claims[k]
	if !ok {
		return "", false
	}
	bar.End = at
	bar.Detail += "; ended: " + why
	b.t.Bars = append(b.t.Bars, *bar)
	delete(b.claims, k)
	return bar.Lane, true
}

// endLane closes every open claim on lane (its worker crashed).
func (b *timeline) endLane(lane string, at int64, why string) {
	for _, k := range b.openKeys() {
		if bar := b.claims[k]; bar.Lane == lane {
			b.endClaim(bar.TaskID, bar.Fence, at, why)
		}
	}
}

func (b *timeline) openKeys() []string {
	keys := make([]string, 0, len(b.claims))
	for k := range b.claims {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (b *timeline) mark(m reports.Mark)   { b.t.Marks = append(b.t.Marks, m) }
func (b *timeline) shade(s reports.Shade) { b.t.Shades = append(b.t.Shades, s) }

// finish closes the claims still open at the end, orders the bars by
// start, and ends the timeline pad after the last moment seen.
func (b *timeline) finish(pad int64) reports.Timeline {
	for _, k := range b.openKeys() {
		bar := b.claims[k]
		b.endClaim(bar.TaskID, bar.Fence, b.end, "still held at the end")
	}
	sort.SliceStable(b.t.Bars, func(i, j int) bool { return b.t.Bars[i].Start < b.t.Bars[j].Start })
	b.t.End = b.end + pad
	for i := range b.t.Shades {
		b.t.Shades[i].End = min(b.t.Shades[i].End, b.t.End)
	}
	return b.t
}

// entryDetail describes one entry of either timeline.
func entryDetail(task string, attempt int, fence int64, op, detail string) string {
	s := fmt.Sprintf("task %s attempt %d fence %d", task, attempt, fence)
	if op != "" {
		s += " op " + op
	}
	if detail != "" {
		s += ": " + detail
	}
	return s
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func firstWord(s string) string {
	w, _, _ := strings.Cut(strings.TrimSpace(s), " ")
	return w
}

// SimTimeline draws a simulated run's timeline from its entries.
func SimTimeline(title string, entries []sim.TimelineEntry, workers int) reports.Timeline {
	lanes := make([]string, workers)
	for i := range lanes {
		lanes[i] = fmt.Sprintf("w%d", i)
	}
	b := newTimeline(title, reports.Fixture, "simulated ms", lanes)
	for _, e := range entries {
		b.seen(e.AtMs)
		simEntry(b, e, entryDetail(e.TaskID, e.Attempt, e.Fence, e.OpID, e.Detail))
	}
	return b.finish(max(b.end/50, 10))
}

// simEntry adds one simulated entry to the timeline.
func simEntry(b *timeline, e sim.TimelineEntry, detail string) {
	mark := func(lane string, kind, label, detail string) {
		b.mark(reports.Mark{Lane: lane, At: e.AtMs, Kind: kind, Label: label, Detail: detail})
	}
	switch e.Kind {
	case string(worker.ActionClaim):
		b.claim(e.Worker, e.AtMs, e.TaskID, e.Attempt, e.Fence, detail)
	case string(worker.ActionComplete), string(worker.ActionFail), string(worker.ActionPause), string(worker.ActionRelease),
		string(worker.ActionCancel):
		b.endClaim(e.TaskID, e.Fence, e.AtMs, e.Kind+" "+e.Detail)
		mark(e.Worker, reports.MarkState, e.Kind, detail)
	case sim.TimelineDrop:
		b.endClaim(e.TaskID, e.Fence, e.AtMs, e.Kind+" "+e.Detail)
		mark(e.Worker, reports.MarkStale, "dropped", detail)
	case string(worker.ActionHeartbeat):
		mark(e.Worker, reports.MarkHeartbeat, "hb", detail)
	case string(worker.ActionCall), string(worker.ActionReceipt), string(worker.ActionReconcile):
		mark(e.Worker, reports.MarkEffect, e.Kind, detail)
	case sim.TimelineExpiry:
		lane, _ := b.endClaim(e.TaskID, e.Fence, e.AtMs, "lease expired")
		mark(lane, reports.MarkExpiry, "lease expired", detail)
	case sim.TimelineStale:
		mark(e.Worker, reports.MarkStale, "refused", detail)
	case sim.TimelineState:
		mark("", reports.MarkState, firstWord(e.Detail), detail)
	case sim.TimelineFault:
		if e.Event == sim.EvStorageDown {
			b.shade(reports.Shade{Start: e.AtMs, End: e.AtMs + e.DurationMs, Label: "storage down"})
			b.seen(e.AtMs + e.DurationMs)
		}
		mark(e.Worker, reports.MarkFault, string(e.Event), e.Detail)
		if e.Event == sim.EvCrash {
			b.endLane(e.Worker, e.AtMs, "worker crashed")
		}
	case sim.TimelineViolation:
		b.t.Violation = &reports.Mark{At: e.AtMs, Kind: reports.MarkViolation, Label: "violation", Detail: e.Detail}
	}
}

// LiveTimeline draws the demo's run from its audit events and the moments
// it noted (signals, the storage outage).
func LiveTimeline(d liverun.Result) reports.Timeline {
	b := newTimeline("the live demo: two workers, signals and the wall clock", reports.Live, "wall ms", []string{"w1", "w2"})
	b.seen(d.DurationMs)
	events := append([]model.Event(nil), d.Events...)
	sort.SliceStable(events, func(i, j int) bool { return events[i].Seq < events[j].Seq })
	for _, e := range events {
		x := max(0, e.At.Sub(d.Started).Milliseconds())
		b.seen(x)
		liveEvent(b, e, x, entryDetail(e.TaskID, e.Attempt, e.Fence, e.OpID, e.Detail))
	}
	liveMoments(b, d.Timeline)
	t := b.finish(200)
	t.Caption = "Live, wall-clock milliseconds since the demo started; from the audit trail (leasehold events) and the demo's own record of the signals it sent. Reproduce: make demo."
	return t
}

// liveEvent adds one audit event of the demo, at x ms, to the timeline.
func liveEvent(b *timeline, e model.Event, x int64, detail string) {
	switch {
	case e.Kind == model.EventClaimed:
		b.claim(e.Actor, x, e.TaskID, e.Attempt, e.Fence, detail+" claimed by "+e.Actor)
	case e.From == model.Running && e.To != model.Running:
		lane, ok := b.endClaim(e.TaskID, e.Fence, x, string(e.Kind))
		if !ok {
			lane = e.Actor
		}
		kind := reports.MarkState
		if e.Kind == model.EventLeaseExpired {
			kind = reports.MarkExpiry
		}
		b.mark(reports.Mark{Lane: lane, At: x, Kind: kind, Label: string(e.Kind), Detail: detail})
	case e.Kind == model.EventStaleWrite:
		b.mark(reports.Mark{Lane: e.Actor, At: x, Kind: reports.MarkStale, Label: "refused", Detail: detail})
	case e.Kind == model.EventEffectIntent || e.Kind == model.EventEffectReceipt:
		b.mark(reports.Mark{Lane: e.Actor, At: x, Kind: reports.MarkEffect, Label: string(e.Kind), Detail: detail})
	case e.From != e.To:
		b.mark(reports.Mark{At: x, Kind: reports.MarkState, Label: string(e.Kind), Detail: detail + " by " + e.Actor})
	}
}

// liveMoments adds what the demo noted itself: signals as marks, a
// worker's freeze and the storage lock as shaded spans.
func liveMoments(b *timeline, moments []liverun.Moment) {
	var stopAt, downAt int64 = -1, -1
	for _, m := range moments {
		switch {
		case m.Kind == liverun.WorkerSignalled && m.Signal == "SIGSTOP":
			stopAt = m.AtMs
		case m.Kind == liverun.WorkerSignalled && m.Signal == "SIGCONT" && stopAt >= 0:
			b.shade(reports.Shade{Start: stopAt, End: m.AtMs, Label: "worker frozen (SIGSTOP)"})
			stopAt = -1
		case m.Kind == liverun.StorageLocked:
			downAt = m.AtMs
		case m.Kind == liverun.StorageUnlocked && downAt >= 0:
			b.shade(reports.Shade{Start: downAt, End: m.AtMs, Label: "exclusive lock held"})
			downAt = -1
		case m.Kind == liverun.WorkerSignalled && (m.Signal == "SIGKILL" || m.Signal == "SIGTERM"):
			b.mark(reports.Mark{Lane: m.Worker, At: m.AtMs, Kind: reports.MarkFault, Label: m.Signal, Detail: m.String()})
		case m.Kind == liverun.WorkerStarted:
			b.mark(reports.Mark{Lane: m.Worker, At: m.AtMs, Kind: reports.MarkFault, Label: "started", Detail: m.String()})
		}
		b.seen(m.AtMs)
	}
}

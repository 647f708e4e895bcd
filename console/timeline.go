package console

import (
	"fmt"
	"slices"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/reports"
)

// taskTimeline draws one task's audit events as the evidence report draws
// a run: a lane per worker that claimed it, each claim a bar marked with
// its fence from the claim to the event that ended it, effects and
// refused writes on the worker's lane, and the other state changes
// (submit, pause, approval, cancellation, ...) on the queue's lane. Times
// are milliseconds since the first event, on the queue's clock.
func taskTimeline(t model.Task, events []model.Event) reports.Timeline {
	events = slices.Clone(events)
	slices.SortStableFunc(events, func(a, b model.Event) int { return cmpInt64(a.Seq, b.Seq) })
	// No Kind: the FIXTURE and LIVE labels belong to the evidence report;
	// this figure is the queue's own record, as the title says.
	tl := reports.Timeline{Title: "task " + t.ID + " from its audit trail", Unit: "ms since submitted"}
	start := events[0].At
	at := func(e model.Event) int64 { return max(0, e.At.Sub(start).Milliseconds()) }
	open := map[int64]*reports.Bar{} // by fence
	var end int64
	for _, e := range events {
		x := at(e)
		end = max(end, x)
		detail := fmt.Sprintf("%s: task %s attempt %d fence %d", e.Kind, e.TaskID, e.Attempt, e.Fence)
		if e.OpID != "" {
			detail += " op " + e.OpID
		}
		if e.Actor != "" {
			detail += " by " + e.Actor
		}
		if e.Reason != "" {
			detail += " (" + string(e.Reason) + ")"
		}
		switch {
		case e.Kind == model.EventClaimed:
			if !slices.Contains(tl.Lanes, e.Actor) {
				tl.Lanes = append(tl.Lanes, e.Actor)
			}
			open[e.Fence] = &reports.Bar{Lane: e.Actor, Start: x, TaskID: e.TaskID, Attempt: e.Attempt, Fence: e.Fence,
				Label: fmt.Sprintf("attempt %d f%d", e.Attempt, e.Fence), Detail: detail}
		case e.From == model.Running && e.To != model.Running:
			lane := ""
			if b, ok := open[e.Fence]; ok {
				b.End, b.Detail = x, b.Detail+"; ended: "+string(e.Kind)
				lane = b.Lane
				tl.Bars = append(tl.Bars, *b)
				delete(open, e.Fence)
			}
			kind := reports.MarkState
			if e.Kind == model.EventLeaseExpired {
				kind = reports.MarkExpiry
			}
			tl.Marks = append(tl.Marks, reports.Mark{Lane: lane, At: x, Kind: kind, Label: string(e.Kind), Detail: detail, TaskID: e.TaskID})
		case e.Kind == model.EventStaleWrite:
			tl.Marks = append(tl.Marks, reports.Mark{Lane: laneOf(&tl, open, e), At: x, Kind: reports.MarkStale, Label: "refused", Detail: detail, TaskID: e.TaskID})
		case e.Kind == model.EventEffectIntent || e.Kind == model.EventEffectReceipt:
			tl.Marks = append(tl.Marks, reports.Mark{Lane: laneOf(&tl, open, e), At: x, Kind: reports.MarkEffect, Label: string(e.Kind), Detail: detail, TaskID: e.TaskID})
		case e.From != e.To || e.Kind == model.EventSubmitted:
			tl.Marks = append(tl.Marks, reports.Mark{At: x, Kind: reports.MarkState, Label: string(e.Kind), Detail: detail})
		}
	}
	for _, fence := range sortedFences(open) {
		b := open[fence]
		b.End, b.Detail = end, b.Detail+"; still held"
		tl.Bars = append(tl.Bars, *b)
	}
	slices.SortStableFunc(tl.Bars, func(a, b reports.Bar) int { return cmpInt64(a.Start, b.Start) })
	tl.End = end + max(1, end/20)
	tl.Caption = "From the task's audit events (leasehold events " + t.ID + "), milliseconds on the queue's clock since the first."
	return tl
}

// laneOf is the lane of the claim an event was written under, or else
// the event's actor's, added to the lanes if it is new.
func laneOf(tl *reports.Timeline, open map[int64]*reports.Bar, e model.Event) string {
	if b, ok := open[e.Fence]; ok {
		return b.Lane
	}
	if e.Actor != "" && !slices.Contains(tl.Lanes, e.Actor) {
		tl.Lanes = append(tl.Lanes, e.Actor)
	}
	return e.Actor
}

func sortedFences(open map[int64]*reports.Bar) []int64 {
	fences := make([]int64, 0, len(open))
	for f := range open {
		fences = append(fences, f)
	}
	slices.Sort(fences)
	return fences
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

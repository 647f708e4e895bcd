package sim

import (
	"strings"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/worker"
)

// TimelineEntry is one thing that happened in a run, for drawing it: a
// worker's action, a fault, an audit event of note, or the violation.
// Times are simulated milliseconds since the start.
type TimelineEntry struct {
	AtMs    int64  `json:"at_ms"`
	Worker  string `json:"worker,omitempty"` // empty for the queue itself and the callers
	Kind    string `json:"kind"`
	TaskID  string `json:"task_id,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
	Fence   int64  `json:"fence,omitempty"`
	OpID    string `json:"op_id,omitempty"`
	Detail  string `json:"detail,omitempty"`
	// Event is a fault entry's schedule event kind (crash, storage_down,
	// ...), and DurationMs a storage outage's length: what a drawing of
	// the timeline needs without reading Detail.
	Event      EventKind `json:"event,omitempty"`
	DurationMs int64     `json:"duration_ms,omitempty"`
}

// Timeline entry kinds beyond the worker actions (worker.Action*).
const (
	TimelineDrop      = "drop" // a worker dropped a claim the queue called stale
	TimelineStale     = "stale_write"
	TimelineExpiry    = "lease_expired"
	TimelineState     = "state" // a state change made by a caller, approver, operator or the reaper
	TimelineFault     = "fault"
	TimelineViolation = "violation"
)

func (w *World) at() int64 { return w.clock.Since(Epoch).Milliseconds() }

func (w *World) timelineAdd(e TimelineEntry) {
	if !w.recordTimeline {
		return
	}
	e.AtMs = w.at()
	w.timeline = append(w.timeline, e)
}

// timelineReport records a worker's step.
func (w *World) timelineReport(r worker.Report) {
	if !w.recordTimeline || r.Action == worker.ActionIdle || r.Action == worker.ActionWait {
		return
	}
	kind := string(r.Action)
	if strings.Contains(r.Outcome, "dropped") {
		kind = TimelineDrop
	}
	e := TimelineEntry{Worker: r.Worker, Kind: kind, TaskID: r.TaskID, Attempt: r.Attempt, Fence: r.Fence, OpID: r.OpID, Detail: r.Outcome}
	if r.Action == worker.ActionClaim {
		for _, c := range r.Claims {
			e.TaskID, e.Attempt, e.Fence = c.TaskID, c.Attempt, c.Fence
			w.timelineAdd(e)
		}
		return
	}
	w.timelineAdd(e)
	for _, c := range r.Claims { // a completion's claim of the slot's next task
		w.timelineAdd(TimelineEntry{Worker: r.Worker, Kind: string(worker.ActionClaim), TaskID: c.TaskID, Attempt: c.Attempt,
			Fence: c.Fence, Detail: "claimed with the completion"})
	}
}

// timelineEvent records the audit events a picture needs: expiries,
// refused writes, and state changes nobody's worker made.
func (w *World) timelineEvent(e model.Event) {
	if !w.recordTimeline || e.TaskID == "" {
		return
	}
	entry := TimelineEntry{TaskID: e.TaskID, Attempt: e.Attempt, Fence: e.Fence, OpID: e.OpID, Detail: e.Detail}
	switch {
	case e.Kind == model.EventLeaseExpired:
		entry.Kind, entry.Detail = TimelineExpiry, string(e.From)+" -> "+string(e.To)+" "+e.Detail
	case e.Kind == model.EventStaleWrite:
		entry.Kind, entry.Worker = TimelineStale, e.Actor
	case e.From != e.To && !strings.HasPrefix(e.Actor, "w"):
		entry.Kind, entry.Detail = TimelineState, string(e.Kind)+" "+string(e.From)+" -> "+string(e.To)+" by "+e.Actor
	default:
		return
	}
	w.timelineAdd(entry)
}

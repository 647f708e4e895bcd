package sim

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/faults"
)

// EventKind names what a schedule event does.
type EventKind string

// Event kinds. Worker events name a worker by index; script events a task
// of the scenario by index.
const (
	EvStep           EventKind = "step"             // a worker takes one Step
	EvRunStart       EventKind = "run_start"        // the oldest step run not begun (of a running worker) begins: simulated time runs from here
	EvRunEnd         EventKind = "run_end"          // the oldest step run that may end (of a running worker) ends: its handler returns
	EvAdvance        EventKind = "advance"          // the fake clock moves on
	EvReap           EventKind = "reap"             // the reaper runs
	EvTick           EventKind = "tick"             // the schedulers enqueue due periodic runs
	EvScript         EventKind = "script"           // a task's caller takes its next scripted action
	EvCrash          EventKind = "crash"            // a worker process dies, losing its memory
	EvRestart        EventKind = "restart"          // a crashed worker starts again
	EvStall          EventKind = "stall"            // a worker stops stepping, keeping its claims
	EvResume         EventKind = "resume"           // a stalled worker carries on with its old claims
	EvStorageDown    EventKind = "storage_down"     // storage fails for a window of simulated time
	EvStorageFault   EventKind = "storage_fault"    // the next storage operation of a kind fails
	EvDuplicate      EventKind = "duplicate"        // a worker's next write is delivered twice
	EvHold           EventKind = "hold"             // a worker's next write is kept for a late second delivery
	EvRedeliver      EventKind = "redeliver"        // a kept write is delivered again, late
	EvLoseResponse   EventKind = "lose_response"    // the next service call loses its response
	EvCrashAfterCall EventKind = "crash_after_call" // a worker dies right after its next external call
	EvRestartSched   EventKind = "restart_scheduler"
	EvAdvanceTo      EventKind = "advance_to"     // the clock moves to a boundary (Name), or Delay before it
	EvShutdown       EventKind = "shutdown"       // a worker shuts down gracefully: it drains, releases and exits
	EvCareless       EventKind = "careless"       // the careless client takes its next action
	EvLimit          EventKind = "limit"          // the operator changes a stored limit (Name) and probes it
	EvLimitsRestore  EventKind = "limits_restore" // the operator puts the scenario's limits back
	EvBatch          EventKind = "batch"          // the batch caller submits a batch of a shape (Name)
	EvFollow         EventKind = "follow"         // the follower reads its next page of the trail
	EvPrune          EventKind = "prune"          // the operator prunes settled tasks (Name: short or long)
	EvGroup          EventKind = "group"          // several actors' writes commit as one group (Name: the actors; Fault: armed before its commit)
)

// Boundaries an EvAdvanceTo lands on: the earliest held lease_until, the
// earliest run_at of a queued task still ahead, the earliest deadline of
// an active task still ahead, the lease_until of the careless client's
// own claim.
const (
	BoundaryLease         = "lease_until"
	BoundaryRunAt         = "run_at"
	BoundaryDeadline      = "deadline"
	BoundaryCarelessLease = "careless_lease_until"
)

// BoundaryNames lists the boundaries in a fixed order.
func BoundaryNames() []string {
	return []string{BoundaryLease, BoundaryRunAt, BoundaryDeadline, BoundaryCarelessLease}
}

// Limits an EvLimit changes: the grant maxima, the overall and the
// per-user depth caps, the per-user running limit, attempts_max and the
// claim batch.
const (
	LimitGrant       = "grant"
	LimitDepth       = "depth"
	LimitUserDepth   = "user_depth"
	LimitUserRunning = "user_running"
	LimitAttempts    = "attempts"
	LimitClaimBatch  = "claim_batch"
)

// LimitNames lists the limits an EvLimit may change, in a fixed order.
func LimitNames() []string {
	return []string{LimitGrant, LimitDepth, LimitUserDepth, LimitUserRunning, LimitAttempts, LimitClaimBatch}
}

// Event is one entry of a schedule. An event that does not apply at its
// moment (a step of a crashed worker, say) is a recorded no-op.
type Event struct {
	Kind   EventKind
	Worker int
	Task   int
	Delay  time.Duration       // advance amount, storage outage length, or how far before a boundary
	Fault  faults.StorageFault // storage fault kind
	Name   string              // the boundary (EvAdvanceTo) or the limit (EvLimit)
}

// onWorker reports whether events of the kind name a worker (Event.Worker).
func (k EventKind) onWorker() bool {
	switch k {
	case EvStep, EvCrash, EvRestart, EvStall, EvResume, EvDuplicate, EvCrashAfterCall, EvHold, EvRedeliver, EvShutdown:
		return true
	}
	return false
}

// String renders the event as it appears in traces and schedules.
func (e Event) String() string {
	if e.Kind.onWorker() {
		return fmt.Sprintf("%s w%d", e.Kind, e.Worker)
	}
	switch e.Kind {
	case EvAdvance, EvStorageDown:
		return fmt.Sprintf("%s %dms", e.Kind, e.Delay.Milliseconds())
	case EvScript:
		return fmt.Sprintf("%s t%d", e.Kind, e.Task)
	case EvStorageFault:
		return fmt.Sprintf("%s %s", e.Kind, e.Fault)
	case EvRestartSched:
		return fmt.Sprintf("%s s%d", e.Kind, e.Worker)
	case EvAdvanceTo:
		if e.Delay > 0 {
			return fmt.Sprintf("%s %s-%dms", e.Kind, e.Name, e.Delay.Milliseconds())
		}
		return fmt.Sprintf("%s %s", e.Kind, e.Name)
	case EvLimit, EvBatch, EvPrune:
		return fmt.Sprintf("%s %s", e.Kind, e.Name)
	case EvGroup:
		if e.Fault != "" {
			return fmt.Sprintf("%s %s %s", e.Kind, e.Name, e.Fault)
		}
		return fmt.Sprintf("%s %s", e.Kind, e.Name)
	}
	return string(e.Kind)
}

// ParseEvent reads an event in its String form.
func ParseEvent(s string) (Event, error) {
	kind, arg, _ := strings.Cut(strings.TrimSpace(s), " ")
	e := Event{Kind: EventKind(kind)}
	number := func(prefix, suffix string) (int64, error) {
		v, ok := strings.CutPrefix(arg, prefix)
		if !ok {
			return 0, fmt.Errorf("event %q: argument must start with %q", s, prefix)
		}
		v, ok = strings.CutSuffix(v, suffix)
		if !ok {
			return 0, fmt.Errorf("event %q: argument must end with %q", s, suffix)
		}
		return strconv.ParseInt(v, 10, 64)
	}
	var n int64
	var err error
	switch k := e.Kind; {
	case k.onWorker():
		n, err = number("w", "")
		e.Worker = int(n)
	case k == EvRestartSched:
		n, err = number("s", "")
		e.Worker = int(n)
	case k == EvAdvance || k == EvStorageDown:
		n, err = number("", "ms")
		e.Delay = time.Duration(n) * time.Millisecond
	case k == EvScript:
		n, err = number("t", "")
		e.Task = int(n)
	case k == EvStorageFault:
		e.Fault, err = faults.ParseStorageFault(arg)
	case k == EvAdvanceTo:
		name, before, cut := strings.Cut(arg, "-")
		e.Name, err = oneOf(s, name, BoundaryNames())
		if err == nil && cut {
			v, ok := strings.CutSuffix(before, "ms")
			if n, err = strconv.ParseInt(v, 10, 64); !ok || err != nil || n == 0 {
				err = fmt.Errorf("event %q: want %s-Nms with N above 0", s, name)
			}
			e.Delay = time.Duration(n) * time.Millisecond
		}
	case k == EvLimit:
		e.Name, err = oneOf(s, arg, LimitNames())
	case k == EvBatch:
		e.Name, err = oneOf(s, arg, BatchShapes())
	case k == EvPrune:
		e.Name, err = oneOf(s, arg, PruneNames())
	case k == EvGroup:
		actors, fault, armed := strings.Cut(arg, " ")
		if _, err = parseGroupActors(actors); err == nil && armed {
			e.Fault, err = faults.ParseStorageFault(fault)
		}
		e.Name = actors
	case k == EvReap || k == EvTick || k == EvLoseResponse || k == EvCareless || k == EvLimitsRestore || k == EvRunStart || k == EvRunEnd ||
		k == EvFollow:
		if arg != "" {
			err = fmt.Errorf("event %q takes no argument", s)
		}
	default:
		err = fmt.Errorf("unknown event kind %q", kind)
	}
	if err == nil && n < 0 {
		err = fmt.Errorf("event %q: negative argument", s)
	}
	return e, err
}

// oneOf returns name if it is one of known, or an error naming the event.
func oneOf(event, name string, known []string) (string, error) {
	for _, k := range known {
		if name == k {
			return name, nil
		}
	}
	return "", fmt.Errorf("event %q: %q is not one of %v", event, name, known)
}

package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/worker"
)

// runExecutor is a simulated worker process's worker.Executor: the runs
// its slots start wait for the schedule. A run begins at an EvRunStart
// (simulated time runs from there) and ends at an EvRunEnd once it may
// (its step's duration has passed since it began, or its context is
// done), whatever happened between: heartbeats and their faults,
// cancellations, crashes, stalls, the claim lost. The events name no
// worker: each takes the oldest run (by when its slot started it) it can
// of the workers whose process runs (a stalled process's handlers are
// stalled with it). A crashed or exited process's runs end with it,
// unrecorded.
type runExecutor struct {
	runs    []startedRun // started by a slot and not ended, in start order
	started *int64       // the world's count of runs started, for their order
}

// startedRun is a run and its place in the world's start order.
type startedRun struct {
	run *worker.Run
	seq int64
}

var _ worker.Executor = (*runExecutor)(nil)

// Start queues the run for the next EvRunStart.
func (e *runExecutor) Start(run *worker.Run) {
	*e.started++
	e.runs = append(e.runs, startedRun{run: run, seq: *e.started})
}

// Poll leaves the run to the schedule.
func (e *runExecutor) Poll(*worker.Run) time.Time { return time.Time{} }

// waiting returns the index of the oldest run not yet begun, or -1.
func (e *runExecutor) waiting() int {
	for i, r := range e.runs {
		if r.run.Began().IsZero() {
			return i
		}
	}
	return -1
}

// ready returns the index of the oldest run that may end now, or -1.
func (e *runExecutor) ready() int {
	for i, r := range e.runs {
		if r.run.Ready() {
			return i
		}
	}
	return -1
}

// end ends run i: it calls the handler (or ends the run with its
// context's cause) and forgets the run.
func (e *runExecutor) end(i int) *worker.Run {
	run := e.runs[i].run
	run.Call()
	e.runs = append(e.runs[:i], e.runs[i+1:]...)
	return run
}

// nextDue returns the earliest time after now at which a begun run may
// end (zero if none).
func (e *runExecutor) nextDue(now time.Time) time.Time {
	var at time.Time
	for _, r := range e.runs {
		if due := r.run.Due(); due.After(now) && (at.IsZero() || due.Before(at)) {
			at = due
		}
	}
	return at
}

// How a step's run ended, as run cells name it.
const (
	// RunReturned: the handler returned while the claim was held, its
	// context not cancelled; what it returned was used.
	RunReturned = "returned"
	// RunOutlivedLease: such a run lasted longer than the lease, which
	// heartbeats kept.
	RunOutlivedLease = "outlived_lease"
	// RunCancelRequested: the task's cancellation, seen in a heartbeat,
	// cancelled the run's context.
	RunCancelRequested = "cancel_requested"
	// RunTimeout: the step's timeout cancelled it.
	RunTimeout = "timeout"
	// RunLeaseLost: the claim ended while it ran; its result was dropped.
	RunLeaseLost = "lease_lost"
)

// RunOutcomes lists the run cells' names in a fixed order.
func RunOutcomes() []string {
	return []string{RunReturned, RunOutlivedLease, RunCancelRequested, RunTimeout, RunLeaseLost}
}

// runKey names a run in the trace.
func runKey(run *worker.Run) string {
	return fmt.Sprintf("task=%s fence=%d step %d", run.Task.ID, run.Task.Version, run.Index)
}

// oldest returns the worker and index of the run, among the runnable
// workers' runs that pick chooses (an index into a worker's runs, or -1),
// that was started first; ok is false when there is none.
func (w *World) oldest(pick func(*runExecutor) int) (worker, index int, ok bool) {
	var seq int64
	for i, sw := range w.workers {
		if _, runs := w.runnable(sw); !runs {
			continue
		}
		if j := pick(sw.exec); j >= 0 && (!ok || sw.exec.runs[j].seq < seq) {
			worker, index, ok, seq = i, j, true, sw.exec.runs[j].seq
		}
	}
	return worker, index, ok
}

// runStart begins the oldest run not begun of a running worker.
func (w *World) runStart() string {
	i, j, ok := w.oldest((*runExecutor).waiting)
	if !ok {
		return "no-op: no run waiting"
	}
	run := w.workers[i].exec.runs[j].run
	run.Begin()
	return fmt.Sprintf("w%d %s begun, takes %dms", i, runKey(run), run.Step.Duration.Milliseconds())
}

// runEnd ends the oldest run that may end of a running worker.
func (w *World) runEnd() string {
	i, j, ok := w.oldest((*runExecutor).ready)
	if !ok {
		return "no-op: no run may end"
	}
	return fmt.Sprintf("w%d %s", i, w.ended(w.workers[i].exec.end(j)))
}

// runnable says whether worker sw's process can run handlers now, and
// if not what the event did.
func (w *World) runnable(sw *simWorker) (string, bool) {
	switch {
	case !sw.proc.Runnable():
		return "no-op: " + sw.proc.String(), false
	case sw.exec == nil:
		return "no-op: shut down", false
	}
	return "", true
}

// ended describes an ended run for the trace and records its run cells.
func (w *World) ended(run *worker.Run) string {
	checkpoint, err := run.Result()
	out := runKey(run) + " ended: "
	cause := context.Cause(run.Context())
	switch {
	case run.Context().Err() != nil:
		out += "context cancelled: " + cause.Error()
	case err != nil:
		out += "error: " + err.Error()
	default:
		out += fmt.Sprintf("ok, checkpoint %q", checkpoint)
	}
	lost := run.Lost()
	switch {
	case lost != nil:
		w.cover.add(scenarios.RunCell(RunLeaseLost))
		return out + "; dropped, not written: " + lost.Error()
	case errors.Is(cause, worker.ErrCancelRequested):
		w.cover.add(scenarios.RunCell(RunCancelRequested))
	case errors.Is(cause, worker.ErrStepTimeout):
		w.cover.add(scenarios.RunCell(RunTimeout))
	default:
		w.cover.add(scenarios.RunCell(RunReturned))
		if w.clock.Since(run.Began()) > w.sc.Lease {
			w.cover.add(scenarios.RunCell(RunOutlivedLease))
		}
	}
	return out
}

// settleRuns begins every run worker i's slots have started and ends
// every run that may end, tracing each (the liveness phase's executor:
// handlers run as soon as they may); it returns how many it moved.
func (w *World) settleRuns(i int, round int, tr *tracer) int {
	sw := w.workers[i]
	if _, ok := w.runnable(sw); !ok {
		return 0
	}
	moved := 0
	for j := sw.exec.waiting(); j >= 0; j = sw.exec.waiting() {
		run := sw.exec.runs[j].run
		run.Begin()
		tr.line(fmt.Sprintf("L%d +%dms run w%d: %s begun", round, w.clock.Since(Epoch).Milliseconds(), i, runKey(run)))
		moved++
	}
	for j := sw.exec.ready(); j >= 0; j = sw.exec.ready() {
		tr.line(fmt.Sprintf("L%d +%dms run w%d: %s", round, w.clock.Since(Epoch).Milliseconds(), i, w.ended(sw.exec.end(j))))
		moved++
	}
	return moved
}

package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/model"
)

// Why a handler's context is cancelled: once the worker cancels a run's
// context, context.Cause of it is one of these. A handler that sees its
// context done should stop and return; what it returns then is not
// written (a requested cancellation or a timeout settles the task the
// worker's own way, and a lost claim is not the worker's to write under).
var (
	// ErrCancelRequested: the task's cancellation was requested (a
	// heartbeat's reply said so). The task ends cancelled once the run
	// returns.
	ErrCancelRequested = errors.New("task cancellation requested")
	// ErrLeaseLost: the claim is no longer this worker's. A heartbeat was
	// refused (another claim is current, or the queue ended the task), or
	// the lease passed by the worker's clock without a good heartbeat. The
	// reaper takes the task over; whatever the run returns is dropped and
	// logged.
	ErrLeaseLost = errors.New("claim lost")
	// ErrShutdown: the worker's shutdown grace ended with the run still
	// under way. The claim is left to the reaper, the run's result dropped.
	ErrShutdown = errors.New("worker shutdown grace ended")
	// ErrStepTimeout: the step's timeout (StepSpec.Timeout, or
	// Config.StepTimeout) passed with the run still under way. The step
	// fails as a transient failure.
	ErrStepTimeout = errors.New("step timed out")
)

// Executor runs the handler's steps for a worker's slots. A slot starts
// each step's Run with Start and looks in on it with Poll each time the
// slot is stepped, until the run has ended; meanwhile it heartbeats on
// schedule, and it cancels the run's context (with one of the causes
// above) when the claim is lost, the task's cancellation is requested,
// the step's timeout passes or the shutdown grace ends.
//
// Inline (the stepped Worker's default) and Goroutines (the live
// Runner's) are the two the package provides; the simulator has its own,
// which makes a run's start and end events of its schedule.
type Executor interface {
	// Start hands the executor a run and returns at once. The executor
	// calls run.Begin when the run begins and run.Call, once, when it
	// ends: at or after run.Due(), or sooner once the run's context is
	// done.
	Start(run *Run)
	// Poll looks in on a run that has not ended, each time its slot is
	// stepped, and returns when the slot should look in again (zero: no
	// time of its own; heartbeats and the run's end wake the slot).
	Poll(run *Run) time.Time
}

// Inline runs each step's handler inside the slot's own Step, once the
// run is due: a run with no Duration ends in the Step that starts it, a
// longer one in the first Step at or after its end (the slot wakes for it
// and heartbeats meanwhile). It suits a driver that steps workers one
// action at a time; a handler that blocks blocks the slot, heartbeats
// included, so the live Runner uses Goroutines.
type Inline struct{}

// Start begins the run.
func (Inline) Start(run *Run) { run.Begin() }

// Poll ends the run once it is due (or its context is done), and
// otherwise asks to look in again when it is due.
func (Inline) Poll(run *Run) time.Time {
	if run.Ready() {
		run.Call()
		return time.Time{}
	}
	return run.Due()
}

// Goroutines runs each step's handler in a goroutine of its own while the
// slot goes on heartbeating: the live Runner's default. A run's end wakes
// its slot (Run.Done).
type Goroutines struct{}

// Start begins the run in a new goroutine, which waits out the step's
// Duration (or until the run's context is done) and then calls the
// handler.
func (Goroutines) Start(run *Run) {
	run.Begin()
	go func() {
		run.Wait()
		run.Call()
	}()
}

// Poll has nothing to do: the run ends on its own.
func (Goroutines) Poll(*Run) time.Time { return time.Time{} }

// Run is one run of a step's handler under one claim: the call of
// Handler.Run with the run's own context. It begins when its executor
// says so and ends once, when Call returns. Its methods are safe for
// concurrent use.
type Run struct {
	// Task is the task as the slot held it when the run started; Index is
	// the step's index and Step what the handler's Plan made of it; OpID
	// is the step's operation ID.
	Task  model.Task
	Index int
	Step  StepSpec
	OpID  string

	ctx    context.Context
	cancel context.CancelCauseFunc
	clock  clockwork.Clock
	call   func(ctx context.Context) (string, error)
	// dropped logs a result that ended after the claim was lost.
	dropped func(cause, err error)

	mu         sync.Mutex
	began      time.Time
	endedAt    time.Time
	calling    bool
	ended      bool
	checkpoint string
	err        error
	lost       error // why the claim ended while the run was under way
	done       chan struct{}
}

// newRun returns a run of call under ctx's cancel.
func newRun(task model.Task, index int, spec StepSpec, clock clockwork.Clock,
	call func(ctx context.Context) (string, error), dropped func(cause, err error)) *Run {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Run{Task: task, Index: index, Step: spec, OpID: model.OperationID(task.ID, index),
		ctx: ctx, cancel: cancel, clock: clock, call: call, dropped: dropped, done: make(chan struct{})}
}

// Context returns the run's context: the handler's. It is never a
// context of the worker's queue writes.
func (r *Run) Context() context.Context { return r.ctx }

// Begin records that the run has begun, now by the worker's clock; later
// calls change nothing.
func (r *Run) Begin() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.began.IsZero() {
		r.began = r.clock.Now()
	}
}

// Began returns when the run began (zero until it has).
func (r *Run) Began() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.began
}

// Due returns when a begun run may end: its beginning plus the step's
// Duration (zero until it has begun).
func (r *Run) Due() time.Time {
	began := r.Began()
	if began.IsZero() {
		return began
	}
	return began.Add(r.Step.Duration)
}

// Ready reports whether the run may end now: it has begun and is due, or
// its context is done.
func (r *Run) Ready() bool {
	if r.ctx.Err() != nil {
		return true
	}
	due := r.Due()
	return !due.IsZero() && !r.clock.Now().Before(due)
}

// Wait blocks until the run is due or its context is done.
func (r *Run) Wait() {
	wait := r.Due().Sub(r.clock.Now())
	if wait <= 0 {
		return
	}
	t := r.clock.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.Chan():
	case <-r.ctx.Done():
	}
}

// Call ends the run: it calls the handler with the run's context and
// keeps what it returns, or, when the context is already done, ends with
// the context's cause without calling it. A handler that panics ends the
// run with a permanent failure. Only the first call does anything.
func (r *Run) Call() {
	r.mu.Lock()
	if r.calling {
		r.mu.Unlock()
		return
	}
	r.calling = true
	r.mu.Unlock()
	if r.ctx.Err() != nil {
		r.end("", context.Cause(r.ctx))
		return
	}
	checkpoint, err := r.protected()
	r.end(checkpoint, err)
}

// protected calls the handler, turning a panic into a permanent failure.
func (r *Run) protected() (checkpoint string, err error) {
	defer func() {
		if p := recover(); p != nil {
			checkpoint, err = "", fmt.Errorf("%w: the handler of step %d panicked: %v", ErrPermanent, r.Index, p)
		}
	}()
	return r.call(r.ctx)
}

// end records the run's outcome and wakes whoever waits on Done; a result
// that ends after the claim was lost is dropped and logged.
func (r *Run) end(checkpoint string, err error) {
	now := r.clock.Now()
	r.mu.Lock()
	r.ended, r.endedAt, r.checkpoint, r.err = true, now, checkpoint, err
	lost := r.lost
	r.mu.Unlock()
	close(r.done)
	if lost != nil {
		r.dropped(lost, err)
	}
}

// EndedAt returns when the run ended, by the worker's clock (zero while
// it has not).
func (r *Run) EndedAt() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.endedAt
}

// Done is closed once the run has ended.
func (r *Run) Done() <-chan struct{} { return r.done }

// Ended reports whether the run has ended.
func (r *Run) Ended() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ended
}

// Result returns what an ended run returned: the step's checkpoint, or
// the handler's error (the context's cause for a run that ended on it).
func (r *Run) Result() (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.checkpoint, r.err
}

// Lost returns why the claim ended while the run was under way (nil
// while it is held): the run's result is dropped.
func (r *Run) Lost() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lost
}

// lose cancels the run because its claim ended (cause), and marks its
// result as dropped: logged when it ends, or at once if it has.
func (r *Run) lose(cause error) {
	r.cancel(cause)
	r.mu.Lock()
	if r.lost != nil {
		r.mu.Unlock()
		return
	}
	r.lost = cause
	ended, err := r.ended, r.err
	r.mu.Unlock()
	if ended {
		r.dropped(cause, err)
	}
}

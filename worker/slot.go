package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/leasehold/leasehold/internal/broken"
	"github.com/leasehold/leasehold/model"
)

// phase is where a slot is in running its task's current step.
type phase int

const (
	phaseNext      phase = iota // decide what step index needs
	phaseWork                   // the step's run is under way (the handler's own work)
	phaseIntent                 // record intent for the step's effect
	phaseCall                   // check the lease locally before calling
	phaseSend                   // call the service
	phaseReconcile              // the effect's outcome is unknown
	phaseReceipt                // record the receipt
	phaseCommit                 // charge the completed step
	phaseUncertain              // park the task: an effect cannot be reconciled
	phaseFail                   // fail the task with s.failure
	phaseRelease                // give the claim back (shutdown)
	phaseDone                   // the claim is over
)

var phaseNames = [...]string{"next", "work", "intent", "call", "send", "reconcile", "receipt", "commit",
	"uncertain", "fail", "release", "done"}

func (p phase) String() string { return phaseNames[p] }

// Slot runs one claimed task, one Step at a time. It is not safe for
// concurrent use; the live runner gives each slot its own goroutine.
type Slot struct {
	cfg   *Config // the worker's, shared by its slots
	claim model.Claim
	task  model.Task // as claimed, with StepsUsed, CostUsed and CancelRequested kept current
	plan  []StepSpec

	phase phase
	// run is the current step's run while phase is work; runCause is why
	// the slot cancelled it (nil while it has not); runFresh says the run
	// started in the Step under way; runTimeout is when the step's timeout
	// passes (zero: none); pollAt is when the executor asked to be looked
	// in on again (zero: no time of its own).
	run        *Run
	runCause   error
	runFresh   bool
	runTimeout time.Time
	pollAt     time.Time
	// asking says the run under way asks the step's RunLedger.Status
	// whether its effect was applied, rather than running the step.
	asking bool
	// lost is a run the slot left behind when its claim ended under it:
	// cancelled, its result to be dropped when it ends.
	lost       *Run
	checkpoint string
	opID       string
	result     string
	ownIntent  bool // this claim recorded the intent of the pending operation
	failure    model.Failure
	draining   bool
	// left says why the claim ended without this worker settling or
	// releasing it (its lease ran out locally, the queue called it stale,
	// an anomaly); empty while held and when the worker ended it.
	left string

	leaseUntil       time.Time
	heartbeatDue     time.Time
	heartbeatFailing bool      // the last heartbeat failed in storage
	retryAt          time.Time // backing off until then
	// storageBackoff grows while queue writes fail in storage and resets
	// when the queue accepts one. serviceBackoff grows while the service is
	// unavailable or cannot answer a status query and resets only when a
	// call or a status query succeeds, so heartbeats accepted meanwhile do
	// not cut it short.
	storageBackoff time.Duration
	serviceBackoff time.Duration

	// refill, when set (by the live Runner), says whether the slot may take
	// its next task with the write that completes this one, and the claim
	// to ask for; refilled holds what that write claimed.
	refill   func() (model.ClaimRequest, bool)
	refilled []model.Claimed

	// hold, when set (by a Runner whose slots claim ahead), says whether
	// the slot, its task's steps all done, is to leave its completion to
	// a later write of its lane (holding, then): see ahead.go. with are
	// the lane's slots holding theirs, which this slot's completing write
	// completes too, and withErrs their outcomes once it has.
	hold     func() bool
	holding  bool
	with     []*Slot
	withErrs []error
}

// EachCompleteClaimer is a CompleteClaimer that can also complete several
// claims in one write, each claiming its next tasks (*queue.Queue's
// CompleteEachAndClaim): a Runner's slots then claim ahead (Config.ClaimAhead).
type EachCompleteClaimer interface {
	CompleteClaimer
	CompleteEachAndClaim(ctx context.Context, claims []model.Claim, next model.ClaimRequest) ([]model.Claimed, []error)
	// ClaimsAhead reports whether a runner's slots should claim ahead
	// (see queue.(*Queue).ClaimsAhead).
	ClaimsAhead() bool
}

// CompleteClaimer is a Queue that can complete a claim and claim the next
// tasks in one write (*queue.Queue's CompleteAndClaim). A live Runner over
// such a queue has each slot take its next task with the write that
// completes the last one, so that completions and claims of many slots
// share commits.
type CompleteClaimer interface {
	CompleteAndClaim(ctx context.Context, c model.Claim, next model.ClaimRequest) ([]model.Claimed, error)
	// ClaimsOnCompletion reports whether the runner should use it (see
	// queue.(*Queue).ClaimsOnCompletion).
	ClaimsOnCompletion() bool
}

func newSlot(cfg *Config, c model.Claimed, now time.Time) *Slot {
	s := &Slot{cfg: cfg, claim: c.Claim, task: c.Task, leaseUntil: c.Claim.LeaseUntil,
		heartbeatDue: now.Add(cfg.Heartbeat)}
	plan, err := cfg.Handler.Plan(c.Task)
	if err != nil {
		s.fail(model.Failure{Class: model.Permanent, Reason: model.PermanentError, Message: err.Error()})
		return s
	}
	s.plan = plan
	for i, step := range plan {
		if l := step.Ledger; l != nil && l.Kind.CanAnswer() && l.Status == nil {
			s.fail(model.Failure{Class: model.Permanent, Reason: model.PermanentError,
				Message: fmt.Sprintf("step %d's run makes a %s effect, but its ledger has no Status", i, l.Kind)})
			return s
		}
	}
	if cfg.Service == nil {
		for i, step := range plan {
			if step.Effect != "" && step.Ledger == nil {
				s.fail(model.Failure{Class: model.Permanent, Reason: model.PermanentError,
					Message: fmt.Sprintf("step %d declares a ledgered effect, but worker %s has no Service", i, cfg.ID)})
				break
			}
		}
	}
	return s
}

// Claim returns the slot's claim.
func (s *Slot) Claim() model.Claim { return s.claim }

// Done reports whether the slot's claim is over.
func (s *Slot) Done() bool { return s.phase == phaseDone }

// Why a slot left its claim without settling or releasing it; the slot's
// log record of it carries the reason as its "left" attribute.
const (
	LeftLeaseExpired = "lease expired locally" // by the slot's own clock
	LeftStaleClaim   = "stale claim"           // the queue refused a write: the claim is no longer current
	LeftStaleFence   = "stale fence"           // a receipt was refused by fence
	LeftTaskGone     = "task gone"             // the task was pruned after it settled while the claim was held
	LeftAnomaly      = "anomaly"               // the queue answered what the protocol does not allow
)

// Left says why a finished slot's claim ended without the worker settling
// or releasing it: LeftLeaseExpired, LeftStaleClaim, LeftStaleFence,
// LeftTaskGone or LeftAnomaly. It is empty while the claim is held and when the worker
// ended it with an accepted write; a claim left is the reaper's.
func (s *Slot) Left() string { return s.left }

// leave ends the claim without a write of this worker's.
func (s *Slot) leave(why string) {
	s.left = why
	s.phase = phaseDone
}

// Phase names what the slot will do next, for traces.
func (s *Slot) Phase() string { return s.phase.String() }

// ReadyAt returns when the slot next has something to do: at once unless
// it is backing off or its step's run is under way. While a run is under
// way the slot has something to do at its next heartbeat, when the step's
// timeout passes, and when its executor asked to look in again (a run
// that has ended is looked at once); a run's end wakes a live slot
// through the run's Done channel. It is never later than the end of the
// lease, when the slot drops the claim.
func (s *Slot) ReadyAt() time.Time {
	at := s.retryAt
	if s.phase == phaseWork && s.run != nil && !s.run.Ended() {
		at = time.Time{}
		earlier := func(t time.Time) {
			if !t.IsZero() && (at.IsZero() || t.Before(at)) {
				at = t
			}
		}
		if s.heartbeats() {
			earlier(s.heartbeatDue)
		}
		earlier(s.runTimeout)
		earlier(s.pollAt)
		earlier(s.leaseUntil)
		if at.Before(s.retryAt) {
			at = s.retryAt
		}
	}
	if s.phase != phaseDone && s.leaseUntil.Before(at) {
		at = s.leaseUntil
	}
	return at
}

// Running returns the current step's run while it has not ended, or nil:
// a live driver waits on its Done channel as well as on ReadyAt.
func (s *Slot) Running() *Run {
	if s.phase == phaseWork && s.run != nil && !s.run.Ended() {
		return s.run
	}
	return nil
}

// Lingering returns the run the slot left behind when its claim ended
// under it, while that run has not ended (its handler has not returned
// yet), or nil.
func (s *Slot) Lingering() *Run {
	if s.lost != nil && !s.lost.Ended() {
		return s.lost
	}
	return nil
}

// heartbeats reports whether the slot heartbeats when one is due: always
// (the broken variant no-heartbeat-during-run stops while a run is under
// way).
func (s *Slot) heartbeats() bool {
	return broken.Pick(broken.NoHeartbeatDuringRun, true, s.run == nil)
}

// drain asks the slot to finish any effect in flight and give the claim
// back.
func (s *Slot) drain() { s.draining = true }

func (s *Slot) fail(f model.Failure) {
	s.failure = f
	s.phase = phaseFail
}

func (s *Slot) report(action Action) Report {
	return Report{Worker: s.cfg.ID, Action: action, TaskID: s.claim.TaskID, Attempt: s.claim.Attempt, Fence: s.claim.Fence}
}

func (s *Slot) log(level slog.Level, msg string, r Report, extra ...any) {
	if !s.cfg.Logger.Enabled(context.Background(), level) {
		return // nothing to build the attributes for
	}
	attrs := []any{"worker", s.cfg.ID, "task_id", s.claim.TaskID, "attempt", s.claim.Attempt,
		"attempt_id", s.claim.AttemptID(), "fence", s.claim.Fence, "action", r.Action}
	if r.OpID != "" {
		attrs = append(attrs, "op_id", r.OpID)
	}
	if r.Outcome != "" {
		attrs = append(attrs, "outcome", r.Outcome)
	}
	if r.StorageError {
		attrs = append(attrs, "storage_error", true)
	}
	if s.left != "" {
		attrs = append(attrs, "left", s.left)
	}
	if r.Err != nil {
		attrs = append(attrs, "error", r.Err.Error())
	}
	s.cfg.Logger.Log(context.Background(), level, msg, append(attrs, extra...)...)
}

// Step performs the slot's next action: at most one queue transaction and
// at most one external call. A claim whose lease has run out by the
// slot's own clock is dropped before anything else, heartbeat included:
// the queue would refuse every write under it, and the reaper owns it now.
// A claim that ends while its step's run is under way leaves the run
// behind, its context cancelled with ErrLeaseLost and its result to be
// dropped. ctx is for the queue's writes and the service's calls; a run's
// handler has a context of its own.
func (s *Slot) Step(ctx context.Context) Report {
	phase := s.phase
	r := s.step(ctx)
	if s.phase == phaseDone && s.run != nil {
		s.loseRun(ErrLeaseLost)
	}
	if r.Action != ActionIdle {
		r.Phase = phase.String()
	}
	return r
}

func (s *Slot) step(ctx context.Context) Report {
	now := s.cfg.Clock.Now()
	if s.phase == phaseDone {
		return s.report(ActionIdle)
	}
	if !now.Before(s.leaseUntil) {
		return s.dropExpired()
	}
	if now.Before(s.retryAt) {
		r := s.report(ActionWait)
		r.Wait = s.retryAt.Sub(now)
		return r
	}
	if s.heartbeats() && !now.Before(s.heartbeatDue) {
		return s.heartbeat(ctx, now)
	}
	// An observed cancellation stops a step that has made no call yet (its
	// run cancelled and waited for by work, its intent not recorded) before
	// its next expensive operation; an effect whose intent is recorded is
	// finished first, as on shutdown. A shutdown lets a run under way end
	// (the live runner's grace bounds it) and starts nothing new.
	if s.task.CancelRequested && s.phase == phaseIntent {
		s.phase = phaseNext
	}
	if s.draining && (s.phase == phaseNext || s.phase == phaseIntent) {
		s.phase = phaseRelease
	}
	switch s.phase {
	case phaseNext:
		return s.next(ctx, now)
	case phaseWork:
		return s.work(ctx, now)
	case phaseIntent:
		return s.intent(ctx, now)
	case phaseCall:
		return s.checkLease(now)
	case phaseSend:
		return s.send(ctx, now)
	case phaseReconcile:
		return s.reconcile(ctx, now)
	case phaseReceipt:
		return s.receipt(ctx, now)
	case phaseCommit:
		return s.commit(ctx, now)
	case phaseUncertain:
		return s.park(ctx, now)
	case phaseFail:
		return s.failTask(ctx, now)
	case phaseRelease:
		return s.release(ctx, now)
	}
	panic(fmt.Sprintf("worker: slot in unknown phase %d", s.phase))
}

// next decides what the next step needs, checking cancellation, the
// deadline, the step limit and the budget first. It writes nothing unless
// the task ends here.
func (s *Slot) next(ctx context.Context, now time.Time) Report {
	index := s.task.StepsUsed
	switch s.decide(now) {
	case nextCancel:
		return s.cancelAck(ctx, now)
	case nextDeadline:
		s.fail(model.Failure{Class: model.Permanent, Reason: model.DeadlineExceeded, Message: "deadline passed before the next step"})
		return s.failTask(ctx, now)
	case nextComplete:
		return s.complete(ctx, now)
	case nextStepsOut:
		s.fail(model.Failure{Class: model.Permanent, Reason: model.StepsExhausted,
			Message: fmt.Sprintf("step %d would pass the step limit %d", index, s.task.StepsMax)})
		return s.failTask(ctx, now)
	case nextBudgetOut:
		s.fail(model.Failure{Class: model.Permanent, Reason: model.BudgetExhausted,
			Message: fmt.Sprintf("step %d costs %d; %d of %d used", index, s.plan[index].Cost, s.task.CostUsed, s.task.CostBudget)})
		return s.failTask(ctx, now)
	case nextPause:
		return s.pause(ctx, now)
	}
	if s.plan[index].Ledger != nil {
		s.phase = phaseIntent // the run is the effect: its intent first
		return s.intent(ctx, now)
	}
	s.startRun(now)
	return s.work(ctx, now)
}

// What the next step of a task needs, as decide finds it.
const (
	nextRun       = iota // start the step's run
	nextCancel           // acknowledge the cancellation
	nextDeadline         // fail: the deadline has passed
	nextComplete         // every step is done
	nextStepsOut         // fail: the step would pass the step limit
	nextBudgetOut        // fail: the step would pass the cost budget
	nextPause            // pause at the step's approval gate
)

// decide says what the next step needs, checking cancellation, the
// deadline, the step limit and the budget first.
func (s *Slot) decide(now time.Time) int {
	index := s.task.StepsUsed
	switch {
	case s.task.CancelRequested:
		return nextCancel
	case s.task.PastDeadline(now):
		return nextDeadline
	case index >= len(s.plan):
		return nextComplete
	case s.task.StepsUsed+1 > s.task.StepsMax:
		return nextStepsOut
	case s.task.CostUsed+s.plan[index].Cost > s.task.CostBudget && broken.Pick(broken.NoBudgetCheck, true, false):
		return nextBudgetOut
	case s.plan[index].Approval != "":
		return nextPause
	}
	return nextRun
}

// startRun hands the step's run to the executor: the handler's Run with a
// context of its own, under the step's timeout.
func (s *Slot) startRun(now time.Time) {
	index, spec, task, handler := s.task.StepsUsed, s.plan[s.task.StepsUsed], s.task, s.cfg.Handler
	run := newRun(task, index, spec, s.cfg.Clock,
		func(ctx context.Context) (string, error) { return handler.Run(ctx, task, index, spec) }, s.dropLog(index))
	// pollAt now: the executor is looked in on at once (by work, in this
	// Step or, for a run started with a commit, the next).
	s.run, s.runCause, s.runFresh, s.pollAt, s.runTimeout = run, nil, true, now, time.Time{}
	if timeout := s.timeoutOf(spec); timeout > 0 {
		s.runTimeout = now.Add(timeout)
	}
	s.phase = phaseWork
	s.cfg.Executor.Start(run)
}

// timeoutOf returns the timeout of a step: its own, or the worker's.
func (s *Slot) timeoutOf(spec StepSpec) time.Duration {
	if spec.Timeout > 0 {
		return spec.Timeout
	}
	return s.cfg.StepTimeout
}

// dropLog returns what logs a result of step index's run that ended after
// the claim was lost (from whatever goroutine ends the run).
func (s *Slot) dropLog(index int) func(cause, err error) {
	cfg, claim := s.cfg, s.claim
	return func(cause, err error) {
		attrs := []any{"worker", cfg.ID, "task_id", claim.TaskID, "attempt", claim.Attempt, "attempt_id", claim.AttemptID(),
			"fence", claim.Fence, "step", index, "cause", cause.Error()}
		if err != nil {
			attrs = append(attrs, "error", err.Error())
		}
		cfg.Logger.Warn("run result dropped, not written: the claim ended while it ran", attrs...)
	}
}

// work watches the step's run: it cancels the run when the task's
// cancellation has been seen or the step's timeout has passed, looks in
// on it through the executor, and once it has ended goes on with what it
// returned.
func (s *Slot) work(ctx context.Context, now time.Time) Report {
	run, fresh := s.run, s.runFresh
	s.runFresh = false
	if !run.Ended() {
		switch {
		case s.task.CancelRequested && !s.asking:
			s.cancelRun(ErrCancelRequested, now)
		case !s.runTimeout.IsZero() && !now.Before(s.runTimeout):
			s.cancelRun(ErrStepTimeout, now)
		}
		s.pollAt = s.cfg.Executor.Poll(run)
	}
	if !run.Ended() {
		r := s.report(ActionWait)
		switch {
		case fresh && s.asking:
			r.Action, r.Outcome, r.OpID = ActionReconcile, "status query started", s.opID
		case fresh:
			r.Action, r.Outcome = ActionRun, fmt.Sprintf("step %d started", run.Index)
		}
		if wait := s.ReadyAt().Sub(now); wait > 0 {
			r.Wait = wait
		}
		return r
	}
	return s.runEnded(ctx, now)
}

// cancelRun cancels the run under way with cause (the first cause stays)
// and looks in on it at once: a run whose context is done may end now.
func (s *Slot) cancelRun(cause error, now time.Time) {
	if s.run == nil || s.runCause != nil {
		return
	}
	s.runCause, s.pollAt = cause, now
	s.run.cancel(cause)
	s.log(slog.LevelInfo, "run cancelled", s.report(ActionRun), "step", s.run.Index, "cause", cause.Error())
}

// loseRun leaves the run under way behind because the claim ended (cause):
// its context is cancelled and its result will be dropped.
func (s *Slot) loseRun(cause error) {
	if s.runCause == nil {
		s.runCause = cause
	}
	s.run.lose(cause)
	s.lost, s.run = s.run, nil
}

// abandon leaves the claim's run behind at the end of the live runner's
// shutdown grace: its context is cancelled with ErrShutdown.
func (s *Slot) abandon() {
	if s.run != nil {
		s.loseRun(ErrShutdown)
	}
}

// runEnded goes on from an ended run: a cancellation seen meanwhile wins
// (the run's work is not charged), a timeout fails the step as transient
// (whether the slot cancelled the run for it or the run ended after it
// had passed, before the slot looked),
// an error fails it as Classify says, and otherwise its checkpoint is kept
// and the step's effect or its commit follows. While shutting down, an
// effect not yet begun is not started.
func (s *Slot) runEnded(ctx context.Context, now time.Time) Report {
	run, cause, timeout := s.run, s.runCause, s.runTimeout
	checkpoint, err := run.Result()
	s.run, s.runCause, s.pollAt, s.runTimeout = nil, nil, time.Time{}, time.Time{}
	if s.asking {
		s.asking, s.phase = false, phaseReconcile
		kind, _ := s.effectTarget()
		r := s.report(ActionReconcile)
		r.OpID, r.Called = s.opID, true
		applied := err == nil
		if errors.Is(err, errNotApplied) {
			err = nil
		}
		return s.reconciled(r, kind, applied, checkpoint, err, now)
	}
	most := model.CheckpointMax
	if run.Step.Ledger != nil {
		most = model.ResultMax // the checkpoint is the receipt's result too
	}
	switch {
	case run.Step.Ledger != nil && err == nil && len(checkpoint) <= most:
		// The run made its effect: its receipt is recorded whatever else
		// has happened meanwhile (a cancellation, the timeout passing),
		// and the step is charged; next settles the rest.
	case s.task.CancelRequested:
		s.phase = phaseNext
		return s.next(ctx, now)
	case errors.Is(cause, ErrStepTimeout), !timeout.IsZero() && !run.EndedAt().Before(timeout):
		s.fail(model.Failure{Class: model.Transient, Message: fmt.Sprintf("step %d timed out after %s", run.Index, s.timeoutOf(run.Step))})
		return s.failTask(ctx, now)
	case err != nil:
		s.fail(model.Failure{Class: Classify(err), Message: err.Error()})
		return s.failTask(ctx, now)
	case len(checkpoint) > most:
		s.fail(model.Failure{Class: model.Permanent, Reason: model.PermanentError,
			Message: fmt.Sprintf("step %d returned a checkpoint of %d bytes (limit %d)", run.Index, len(checkpoint), most)})
		return s.failTask(ctx, now)
	}
	s.checkpoint = checkpoint
	switch {
	case run.Step.Ledger != nil:
		s.result, s.phase = checkpoint, phaseReceipt // the run was the effect
		return s.receipt(ctx, now)
	case run.Step.Effect == "":
		s.phase = phaseCommit
		return s.commit(ctx, now)
	case s.draining:
		s.phase = phaseRelease
		return s.release(ctx, now)
	}
	s.phase = phaseIntent
	return s.intent(ctx, now)
}

// outcome routes a queue error: nil means carry on. A stale claim is
// dropped; a write the queue refused after settling the task (a limit or
// deadline reached) ends the claim; a task that no longer exists was
// settled by the queue (the reaper, a deadline, an operator) and pruned
// since, so the claim is dropped as a stale one is; a storage error keeps
// the phase and backs off; anything else is an anomaly and ends the claim.
func (s *Slot) outcome(r *Report, err error, now time.Time) bool {
	r.Err = err
	switch {
	case err == nil:
		s.storageBackoff = 0
		r.Accepted = true
		return true
	case errors.Is(err, model.ErrStaleClaim):
		r.Outcome = "stale claim dropped"
		s.leave(LeftStaleClaim)
	case errors.Is(err, model.ErrTaskNotFound):
		r.Outcome = "claim dropped: the task was pruned"
		s.leave(LeftTaskGone)
	case errors.Is(err, model.ErrBudgetExhausted), errors.Is(err, model.ErrStepsExhausted), errors.Is(err, model.ErrDeadlineExceeded):
		r.Accepted = true
		r.Outcome = string(refusalReason(err)) + ": task failed by the queue"
		s.phase = phaseDone
	case errors.Is(err, model.ErrInvalidInput), errors.Is(err, model.ErrNotFound), errors.Is(err, model.ErrStepConflict),
		errors.Is(err, model.ErrInvalidTransition), errors.Is(err, model.ErrEffectReceipted):
		r.Anomaly = err.Error()
		r.Outcome = "claim abandoned"
		s.leave(LeftAnomaly)
	default:
		r.Outcome = "storage error; retry in " + s.backOff(&s.storageBackoff, now).String()
		r.StorageError = true
	}
	level := slog.LevelInfo
	if r.Anomaly != "" || r.StorageError {
		level = slog.LevelWarn
	}
	s.log(level, "queue write refused", *r)
	return false
}

// backOff advances backoff (the storage or the service one) to its next
// delay, between StorageBackoffMin and StorageBackoffMax, makes the slot
// wait that long from now, and returns the delay.
func (s *Slot) backOff(backoff *time.Duration, now time.Time) time.Duration {
	*backoff = nextBackoff(*backoff, s.cfg.StorageBackoffMin, s.cfg.StorageBackoffMax)
	s.retryAt = now.Add(*backoff)
	return *backoff
}

// nextBackoff doubles current within [least, most].
func nextBackoff(current, least, most time.Duration) time.Duration {
	if current < least {
		return least
	}
	if current *= 2; current > most {
		return most
	}
	return current
}

func (s *Slot) heartbeat(ctx context.Context, now time.Time) Report {
	r := s.report(ActionHeartbeat)
	r.Write = model.WriteHeartbeat
	res, err := s.cfg.Queue.Heartbeat(ctx, s.claim, s.cfg.Lease)
	if !s.outcome(&r, err, now) {
		s.heartbeatFailing = r.StorageError
		return r
	}
	s.heartbeatFailing = false
	s.leaseUntil, s.heartbeatDue = res.LeaseUntil, now.Add(s.cfg.Heartbeat)
	r.LeaseUntil = res.LeaseUntil
	if broken.Pick(broken.WorkerIgnoresCancel, res.CancelRequested, false) && !s.task.CancelRequested {
		s.task.CancelRequested = true
		r.Outcome = "cancellation requested"
	}
	if s.run != nil {
		ran := time.Duration(0)
		if began := s.run.Began(); !began.IsZero() {
			ran = now.Sub(began)
		}
		s.log(slog.LevelInfo, "heartbeat", r, "step", s.run.Index, "run_ms", ran.Milliseconds(),
			"lease_until_ms", res.LeaseUntil.UnixMilli())
	}
	if s.task.CancelRequested && !s.asking {
		s.cancelRun(ErrCancelRequested, now)
	}
	return r
}

func (s *Slot) intent(ctx context.Context, now time.Time) Report {
	r := s.report(ActionIntent)
	r.Write = model.WriteIntent
	res, err := s.cfg.Queue.RecordIntent(ctx, s.claim, s.task.StepsUsed)
	if !s.outcome(&r, err, now) {
		return r
	}
	s.opID, r.OpID = res.OpID, res.OpID
	r.Outcome = string(res.Status)
	if s.plan[s.task.StepsUsed].Ledger != nil && res.Status == model.IntentReceipted {
		s.checkpoint = res.Result // the run that made the effect is not run again
	}
	status := res.Status
	if status == model.IntentReceipted {
		status = broken.Pick(broken.WorkerIgnoresReceipts, status, model.IntentRecorded)
	}
	switch {
	case status == model.IntentReceipted:
		s.phase = phaseCommit // never call a receipted operation again
	case status == model.IntentUncertain:
		s.ownIntent = false
		s.phase = phaseReconcile
	default:
		s.ownIntent = true
		s.phase = phaseCall
	}
	s.log(slog.LevelInfo, "effect intent", r)
	return r
}

// checkLease refuses to call the service once this worker's own view of
// the lease has run out. A stall after this check can still make the call
// late; the fence in the call and the ledger protocol cover that.
func (s *Slot) checkLease(now time.Time) Report {
	if !now.Before(s.leaseUntil) {
		return s.dropExpired()
	}
	r := s.report(ActionCheckLease)
	r.OpID = s.opID
	s.phase = phaseSend
	r.Outcome = "lease held"
	return r
}

// dropExpired ends a claim whose lease has run out by this worker's clock,
// writing nothing: any write would be refused as stale, and the reaper
// will charge the attempt and requeue the task.
func (s *Slot) dropExpired() Report {
	r := s.report(ActionCheckLease)
	r.OpID = s.opID
	r.Outcome = "lease expired locally; claim dropped"
	s.leave(LeftLeaseExpired)
	s.log(slog.LevelWarn, "lease expired locally; claim left to the reaper", r)
	return r
}

// send calls the service. Only checkLease leads here, so every call
// (a first call, a retry after the service was unavailable, a resend after
// reconciliation) follows a check of the lease.
func (s *Slot) send(ctx context.Context, now time.Time) Report {
	if s.plan[s.task.StepsUsed].Ledger != nil {
		s.startRun(now) // the run makes the effect
		return s.work(ctx, now)
	}
	r := s.report(ActionCall)
	r.OpID, r.Called = s.opID, true
	result, err := s.cfg.Service.Call(ctx, Call{OpID: s.opID, TaskID: s.claim.TaskID,
		Effect: s.plan[s.task.StepsUsed].Effect, Fence: s.claim.Fence})
	r.Err = err
	switch {
	case err == nil:
		s.serviceBackoff = 0
		s.result, s.phase = result, phaseReceipt
		r.Outcome = "applied"
	case errors.Is(err, ErrStaleFence):
		s.leave(LeftStaleFence)
		r.Outcome = "refused: stale fence; claim dropped"
	case errors.Is(err, ErrUnavailable):
		s.phase = phaseCall // the retry checks the lease again after the backoff
		r.Outcome = "service unavailable; retry in " + s.backOff(&s.serviceBackoff, now).String()
	default:
		s.phase = phaseReconcile
		r.Outcome = "outcome unknown"
	}
	s.log(slog.LevelInfo, "effect call", r)
	return r
}

// reconcile settles an operation whose outcome is unknown according to
// what the service can do (see ServiceKind). An operation to be called
// again goes back through checkLease, as a first call does.
func (s *Slot) reconcile(ctx context.Context, now time.Time) Report {
	kind, status := s.effectTarget()
	if kind == Dedup {
		s.phase = phaseCall // calling again is safe; the lease check is still due
		return s.checkLease(now)
	}
	r := s.report(ActionReconcile)
	r.OpID = s.opID
	if !kind.CanAnswer() {
		r.Outcome = "service cannot say; to review"
		s.phase = phaseUncertain
		return r
	}
	r.Called = true
	if s.plan[s.task.StepsUsed].Ledger != nil {
		s.startStatus(now) // a run of its own, heartbeated like the step's
		return s.work(ctx, now)
	}
	applied, result, err := status(ctx, s.opID, s.claim.Fence)
	return s.reconciled(r, kind, applied, result, err, now)
}

// reconciled goes on from a status answer (err: none could be had).
func (s *Slot) reconciled(r Report, kind ServiceKind, applied bool, result string, err error, now time.Time) Report {
	r.Err = err
	if err == nil {
		s.serviceBackoff = 0
	}
	switch {
	case err != nil:
		r.Outcome = "status unknown; retry in " + s.backOff(&s.serviceBackoff, now).String()
	case applied:
		s.result, s.phase = result, phaseReceipt
		if s.plan[s.task.StepsUsed].Ledger != nil {
			s.checkpoint = result // the run that made the effect is not run again
		}
		r.Outcome = "applied"
	case kind == Fenced || s.ownIntent:
		s.phase = phaseCall
		r.Outcome = "not applied; call again"
	default:
		s.phase = phaseUncertain
		r.Outcome = "not applied, but an earlier claim may still call; to review"
	}
	s.log(slog.LevelInfo, "effect reconcile", r)
	return r
}

// errNotApplied is how a status run says the operation was not applied.
var errNotApplied = errors.New("operation not applied")

// startStatus hands the executor a run that asks the step's
// RunLedger.Status about the pending operation, under the step's timeout
// and cancelled as any run when the claim ends. A requested cancellation
// does not stop it: an effect whose intent is recorded is settled first.
func (s *Slot) startStatus(now time.Time) {
	index, spec, op, fence := s.task.StepsUsed, s.plan[s.task.StepsUsed], s.opID, s.claim.Fence
	status := spec.Ledger.Status
	spec.Duration = 0
	run := newRun(s.task, index, spec, s.cfg.Clock, func(ctx context.Context) (string, error) {
		applied, result, err := status(ctx, op, fence)
		switch {
		case err != nil:
			return "", err
		case !applied:
			return "", errNotApplied
		}
		return result, nil
	}, s.dropLog(index))
	s.run, s.runCause, s.runFresh, s.pollAt, s.runTimeout, s.asking = run, nil, true, now, time.Time{}, true
	if timeout := s.timeoutOf(spec); timeout > 0 {
		s.runTimeout = now.Add(timeout)
	}
	s.phase = phaseWork
	s.cfg.Executor.Start(run)
}

// effectTarget returns what the current step's effect target can do and
// how to ask it: the step's own ledger for an effect its run makes, the
// worker's Service otherwise.
func (s *Slot) effectTarget() (ServiceKind, func(ctx context.Context, opID string, fence int64) (bool, string, error)) {
	if l := s.plan[s.task.StepsUsed].Ledger; l != nil {
		return l.Kind, l.Status
	}
	return s.cfg.Service.Kind(), s.cfg.Service.Status
}

func (s *Slot) receipt(ctx context.Context, now time.Time) Report {
	r := s.report(ActionReceipt)
	r.OpID, r.Write = s.opID, model.WriteReceipt
	if !s.outcome(&r, s.cfg.Queue.RecordReceipt(ctx, s.claim, s.opID, s.result), now) {
		return r
	}
	s.phase = phaseCommit
	return r
}

func (s *Slot) commit(ctx context.Context, now time.Time) Report {
	r := s.report(ActionStep)
	r.Write = model.WriteStep
	index, cost := s.task.StepsUsed, s.plan[s.task.StepsUsed].Cost
	res, err := s.cfg.Queue.CompleteStep(ctx, model.StepWrite{Claim: s.claim, Index: index, Cost: cost, Checkpoint: s.checkpoint})
	if !s.outcome(&r, err, now) {
		return r
	}
	s.task.StepsUsed, s.task.CostUsed, s.task.Checkpoint = index+1, s.task.CostUsed+cost, s.checkpoint
	s.task.CancelRequested = s.task.CancelRequested || broken.Pick(broken.WorkerIgnoresCancel, res.CancelRequested, false)
	s.opID, s.result, s.ownIntent, s.phase = "", "", false, phaseNext
	r.Outcome = fmt.Sprintf("step %d cost %d", index, cost)
	if res.Replayed {
		r.Outcome += " (replayed)"
	}
	s.log(slog.LevelInfo, "step completed", r)
	// Starting the next step's run writes nothing, so it goes with this
	// write when nothing else comes first (no shutdown, and next would
	// start it); the executor looks in on it from the next Step.
	if !s.draining && s.decide(now) == nextRun && s.plan[s.task.StepsUsed].Ledger == nil {
		s.startRun(now)
		s.runFresh = false
	}
	return r
}

// finish makes the write that ends the claim (named name, and reported
// as the action of that name) and, once the queue accepts it, ends the
// slot with the outcome write returned and logs msg.
func (s *Slot) finish(now time.Time, name model.Write, msg string, write func() (string, error)) Report {
	r := s.report(Action(name))
	r.Write = name
	outcome, err := write()
	if !s.outcome(&r, err, now) {
		return r
	}
	s.phase = phaseDone
	r.Outcome = outcome
	s.log(slog.LevelInfo, msg, r)
	return r
}

func (s *Slot) pause(ctx context.Context, now time.Time) Report {
	gate := s.plan[s.task.StepsUsed].Approval
	return s.finish(now, model.WritePause, "paused for approval", func() (string, error) {
		to, err := s.cfg.Queue.Pause(ctx, s.claim, s.task.StepsUsed, gate)
		return "to " + string(to) + " at gate " + gate, err
	})
}

func (s *Slot) complete(ctx context.Context, now time.Time) Report {
	if s.hold != nil && s.hold() {
		s.phase, s.holding = phaseDone, true
		return s.report(ActionIdle)
	}
	if cc, ok := s.cfg.Queue.(CompleteClaimer); ok && s.refill != nil {
		if next, ok := s.refill(); ok {
			if ec, ok := cc.(EachCompleteClaimer); ok && len(s.with) > 0 {
				return s.completeEachAndClaim(ctx, now, ec, next)
			}
			return s.completeAndClaim(ctx, now, cc, next)
		}
	}
	return s.finish(now, model.WriteComplete, "task completed", func() (string, error) {
		return "completed", s.cfg.Queue.Complete(ctx, s.claim)
	})
}

// completeAndClaim completes the task and claims next in one write; the
// claims it made are the slot's refilled, listed in the report.
func (s *Slot) completeAndClaim(ctx context.Context, now time.Time, cc CompleteClaimer, next model.ClaimRequest) Report {
	var claimed []model.Claimed
	r := s.finish(now, model.WriteComplete, "task completed", func() (string, error) {
		var err error
		claimed, err = cc.CompleteAndClaim(ctx, s.claim, next)
		return "completed", err
	})
	if r.Err != nil {
		return r
	}
	s.refilled = append(s.refilled, claimed...)
	s.reportClaims(&r, claimed)
	return r
}

// completeEachAndClaim completes the task and those of the slots held
// with it (with) in one write, each claiming next; their outcomes are
// withErrs, and every task claimed (by this completion or theirs) is the
// slot's refilled. The held completions go in this write only: a retry
// of this one's (after a storage error) completes it alone.
func (s *Slot) completeEachAndClaim(ctx context.Context, now time.Time, ec EachCompleteClaimer, next model.ClaimRequest) Report {
	claims := make([]model.Claim, 0, len(s.with)+1)
	for _, h := range s.with {
		claims = append(claims, h.claim)
	}
	claims = append(claims, s.claim)
	var claimed []model.Claimed
	var errs []error
	r := s.finish(now, model.WriteComplete, "task completed", func() (string, error) {
		claimed, errs = ec.CompleteEachAndClaim(ctx, claims, next)
		return "completed", errs[len(errs)-1]
	})
	s.withErrs, s.with = errs[:len(errs)-1], nil
	s.refilled = append(s.refilled, claimed...)
	s.reportClaims(&r, claimed)
	return r
}

// reportClaims lists the claims a completing write made in its report and
// logs each.
func (s *Slot) reportClaims(r *Report, claimed []model.Claimed) {
	for _, c := range claimed {
		r.Claims = append(r.Claims, c.Claim)
		s.cfg.Logger.Info("task claimed", "worker", s.cfg.ID, "task_id", c.Claim.TaskID, "attempt", c.Claim.Attempt,
			"attempt_id", c.Claim.AttemptID(), "fence", c.Claim.Fence)
	}
	if len(claimed) > 0 {
		r.Outcome += fmt.Sprintf("; %d claimed", len(claimed))
	}
}

func (s *Slot) failTask(ctx context.Context, now time.Time) Report {
	return s.finish(now, model.WriteFail, "task failed", func() (string, error) {
		to, err := s.cfg.Queue.Fail(ctx, s.claim, s.failure)
		return fmt.Sprintf("%s: to %s", failureName(s.failure), to), err
	})
}

// failureName names a failure in a report: by its reason where the worker
// gave one (budget_exhausted, steps_exhausted, deadline_exceeded), by its
// class otherwise ("permanent failure", "transient failure").
func failureName(f model.Failure) string {
	if f.Reason != "" && f.Reason != model.PermanentError {
		return string(f.Reason)
	}
	return string(f.Class) + " failure"
}

// refusalReason is the reason the queue failed a task with when it refused
// a write with err (a limit or the deadline reached).
func refusalReason(err error) model.Reason {
	switch {
	case errors.Is(err, model.ErrBudgetExhausted):
		return model.BudgetExhausted
	case errors.Is(err, model.ErrStepsExhausted):
		return model.StepsExhausted
	}
	return model.DeadlineExceeded
}

func (s *Slot) park(ctx context.Context, now time.Time) Report {
	s.failure = model.Failure{Class: model.Uncertain, OpID: s.opID, Message: "effect outcome unknown: " + s.opID}
	r := s.failTask(ctx, now)
	r.OpID = s.opID
	return r
}

func (s *Slot) cancelAck(ctx context.Context, now time.Time) Report {
	return s.finish(now, model.WriteCancelAck, "cancellation observed", func() (string, error) {
		return "cancelled", s.cfg.Queue.AcknowledgeCancel(ctx, s.claim)
	})
}

func (s *Slot) release(ctx context.Context, now time.Time) Report {
	return s.finish(now, model.WriteRelease, "claim released", func() (string, error) {
		to, err := s.cfg.Queue.Release(ctx, s.claim)
		return "to " + string(to), err
	})
}

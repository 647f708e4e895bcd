package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/faults"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/worker"
	"github.com/leasehold/leasehold/worker/workertest"
)

// Epoch is the fixed UTC instant every simulation starts at.
var Epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// Actors the world acts as.
const (
	approverActor = "manager"
	operatorActor = "operator"
)

// simWorker is one worker process of the world.
type simWorker struct {
	proc    *faults.Process
	queue   *faults.Queue
	w       *worker.Worker // nil while crashed or shut down
	exec    *runExecutor   // w's executor: its step runs (nil with w)
	crashAt bool           // crash right after the next external call
	// draining: the worker was told to shut down and is releasing its
	// claims; stopped: it drained and exited (a restart starts it again).
	draining, stopped bool
}

// taskState is the world's view of one scenario task's caller.
type taskState struct {
	spec         scenarios.Task
	request      model.SubmitRequest // as first submitted (deadline fixed then)
	id           string              // empty until submitted
	next         int                 // index of the next scripted act
	failures     []string            // expectation failures seen by the caller
	stalledBy    int                 // worker stalled by StallClaimant, -1 if none
	stalledAt    int64               // fence of the stalled claim
	resumed      bool                // the script resumed the stalled claimant with its memory
	lateSeen     bool                // the stalled claimant's late result was refused
	lateAccepted bool                // the stalled claimant's late result was accepted (wrong)
	lateSubmit   bool                // refused because its deadline passed while the caller retried
}

// World is the simulated world: the real queue on an in-memory SQLite
// database behind a fault-injecting driver, real workers, the effect
// service double, a fake clock, and the scenario's callers.
type World struct {
	ctx     context.Context
	sc      scenarios.Scenario
	seed    uint64
	mix     FaultMix
	clock   *clockwork.FakeClock
	storage *faults.Storage
	db      opened // the queue's database, closed by close
	// q is the queue every operation of the world goes through: the real
	// queue and, in lockstep with it, the reference model (oracle.go).
	q              *lockstep
	service        *workertest.Service
	svc            *faults.Service
	workers        []*simWorker
	tasks          []*taskState
	checker        *checker
	anomalies      []string
	recordTimeline bool
	timeline       []TimelineEntry
	// schedDown counts the ticks each scheduler still misses after a
	// restart.
	schedDown []int
	// stopped holds the schedules as they were when the liveness phase
	// stopped them, at stoppedAt.
	stopped    []model.Schedule
	stoppedAt  time.Time
	recoveries map[string]int // operator recoveries per task
	// cover collects the run's coverage map; where names what the
	// current event's storage operations are (a worker's action, or an
	// operation of the world).
	cover recorder
	where string
	// runsStarted counts the step runs the workers' slots have started,
	// for the order the schedule's run events take them in.
	runsStarted int64
	// duringRun names where else the current event's storage faults hit:
	// "work" when it is a heartbeat of a slot whose step's run is under
	// way.
	duringRun string
	// careless is the careless client (see carelessClient); batcher the
	// batch caller and follower the trail's follower (world_protocol.go).
	careless carelessClient
	batcher  batchCaller
	follower follower
	// prunes counts the operator's prunes; pruned holds the tasks they
	// removed, by TaskKey.
	prunes int
	pruned map[string]string
	// prunedRetried says, of each pruned task, whether its trail showed a
	// retried attempt (expectations read it; its events are gone).
	prunedRetried map[string]bool
	// base is the scenario's limits as set up; limitsMoved says the
	// operator has changed the stored limits since; probes counts the
	// operator's probes (probe task keys, and the values they try).
	base        model.Limits
	limitsMoved bool
	probes      int
	// groups draws the order of a group event's members (world_groups.go);
	// stepIdle says the last worker step found nothing to do, or could not
	// step; stepWait, for an idle step, how long until the worker has
	// something to do.
	groups   *rand.Rand
	stepIdle bool
	stepWait time.Duration
	// listed keeps allTasks's order between calls.
	listed taskList
	// lateSent names the superseded claims ("task/fence") of stalled
	// workers whose late completion a group event has sent (groupLate).
	lateSent map[string]bool
}

// worldOptions are the test-only switches of a world.
type worldOptions struct {
	noOracle bool     // run without the reference model in lockstep
	only     []string // the checks that report; nil: all
	store    Store    // the database; zero: SQLite in memory
}

// newWorld builds the world for one seed.
func newWorld(sc scenarios.Scenario, seed uint64, mix FaultMix, opts worldOptions) (*World, error) {
	ctx := context.Background() // never cancelled: cancellation rolls database/sql back asynchronously
	clock := clockwork.NewFakeClockAt(Epoch)
	queueClock := newPollClock(clock) // the follower's waits say when they park (world_protocol.go)
	db, err := opts.store.open(ctx, queueClock, seed)
	if err != nil {
		return nil, err
	}
	q, storage := db.q, db.storage
	ls, err := newLockstep(ctx, q, storage, clock, seed, !opts.noOracle)
	if err != nil {
		return nil, errors.Join(err, db.close())
	}
	w := &World{ctx: ctx, sc: sc, seed: seed, mix: mix, clock: clock, storage: storage, q: ls, db: db,
		service: workertest.NewService(mix.ServiceKind, clock)}
	w.follower.clock = queueClock
	w.svc = faults.NewService(w.service)
	w.checker = newChecker(w, opts.only)
	ls.report, ls.limitsChanged, ls.cover = w.checker.lockstepReport, w.checker.limitsChanged, &w.cover
	ls.served = servedBy(sc)
	if err := w.setup(); err != nil {
		return nil, errors.Join(err, db.close())
	}
	for i := 0; i < sc.Workers; i++ {
		sw := &simWorker{proc: faults.NewProcess(workerName(i)), queue: faults.NewQueue(w.q)}
		if sw.w, err = w.newWorker(i, sw); err != nil {
			return nil, errors.Join(err, db.close())
		}
		w.workers = append(w.workers, sw)
	}
	for _, t := range sc.Tasks {
		w.tasks = append(w.tasks, &taskState{spec: t, stalledBy: -1})
	}
	w.schedDown = make([]int, max(1, sc.Schedulers))
	w.recoveries = map[string]int{}
	w.pruned, w.prunedRetried = map[string]string{}, map[string]bool{}
	w.groups = source(seed, streamGroupOrder)
	return w, nil
}

// claim returns the claim of the task under fence that the worker (alive)
// holds, if it holds one.
func (sw *simWorker) claim(taskID string, fence int64) (model.Claim, bool) {
	if sw.w == nil {
		return model.Claim{}, false
	}
	for _, c := range sw.w.Claims() {
		if c.TaskID == taskID && c.Fence == fence {
			return c, true
		}
	}
	return model.Claim{}, false
}

// migratedImage is an empty database at the current schema, made once per
// process: every world starts from a copy instead of migrating afresh.
var migratedImage = sync.OnceValues(func() ([]byte, error) {
	ctx := context.Background()
	q, err := queue.Open(ctx, queue.Options{Path: queue.Memory, Clock: clockwork.NewFakeClockAt(Epoch), IDs: model.NewSeededIDs(0)})
	if err != nil {
		return nil, fmt.Errorf("sim: migrate the template database: %w", err)
	}
	defer q.Close()
	return q.Image(ctx)
})

func workerName(i int) string { return fmt.Sprintf("w%d", i) }

// setup stores the scenario's limits and schedules.
func (w *World) setup() error {
	limits, _, err := w.q.Limits(w.ctx)
	if err != nil {
		return err
	}
	if w.sc.AttemptsMax > 0 {
		limits.AttemptsMax = w.sc.AttemptsMax
	}
	if err := w.q.SetLimits(w.ctx, limits, operatorActor); err != nil {
		return err
	}
	w.base = limits
	for _, u := range w.sc.UserLimits {
		if err := w.q.SetUserLimit(w.ctx, u, operatorActor); err != nil {
			return err
		}
	}
	for _, s := range w.sc.Schedules {
		spec := s.Spec
		spec.Origin = Epoch.Add(s.OriginOffset)
		if _, err := w.q.AddSchedule(w.ctx, spec, operatorActor); err != nil {
			return err
		}
	}
	return nil
}

func (w *World) newWorker(i int, sw *simWorker) (*worker.Worker, error) {
	var q worker.Queue = sw.queue
	if w.q.ref != nil {
		q = watcher{l: w.q, inner: sw.queue}
	}
	sw.exec = &runExecutor{started: &w.runsStarted}
	return worker.New(worker.Config{ID: workerName(i), Queue: q, Handler: w.handlerOf(i), Service: w.svc,
		Executor: sw.exec, Clock: w.clock, Concurrency: w.sc.Concurrency, Lease: w.sc.Lease, Heartbeat: w.sc.Heartbeat,
		Refill:  w.mix.Refill,
		PollMin: 50 * time.Millisecond, PollMax: 500 * time.Millisecond,
		StorageBackoffMin: 50 * time.Millisecond, StorageBackoffMax: time.Second})
}

// close releases the database (and, on PostgreSQL, drops the world's
// schema).
func (w *World) close() error { return w.db.close() }

// apply executes one event and returns the outcome for the trace.
func (w *World) apply(e Event) string {
	switch e.Kind {
	case EvStep:
		return w.step(e.Worker)
	case EvRunStart:
		return w.runStart()
	case EvRunEnd:
		return w.runEnd()
	case EvAdvance:
		w.clock.Advance(e.Delay)
		return "ok"
	case EvReap:
		res, err := w.q.Reap(w.ctx)
		if err != nil {
			return "error: " + err.Error()
		}
		return fmt.Sprintf("expired %d deadlines %d", res.Expired, res.Deadlines)
	case EvTick:
		return w.tick()
	case EvRestartSched:
		if e.Worker >= len(w.schedDown) {
			return "no-op: no such scheduler"
		}
		w.schedDown[e.Worker] = schedulerDownTicks
		return fmt.Sprintf("scheduler s%d down for %d ticks", e.Worker, schedulerDownTicks)
	case EvScript:
		return w.script(w.tasks[e.Task])
	case EvCrash:
		return w.crash(e.Worker)
	case EvRestart:
		return w.restart(e.Worker)
	case EvStall:
		if err := w.workers[e.Worker].proc.Stall(); err != nil {
			return "no-op: " + err.Error()
		}
		return "stalled"
	case EvResume:
		if w.scriptStalled(e.Worker) {
			return "no-op: a script holds this stall"
		}
		if err := w.workers[e.Worker].proc.Resume(); err != nil {
			return "no-op: " + err.Error()
		}
		return "resumed"
	case EvStorageDown:
		w.storage.SetUnavailableUntil(w.clock.Now().Add(e.Delay))
		return "storage unavailable until +" + fmt.Sprint(w.clock.Since(Epoch).Milliseconds()+e.Delay.Milliseconds()) + "ms"
	case EvStorageFault:
		w.storage.Arm(e.Fault)
		return "armed"
	case EvDuplicate:
		w.workers[e.Worker].queue.ArmDuplicate()
		return "armed"
	case EvHold:
		w.workers[e.Worker].queue.ArmHold()
		return "armed"
	case EvRedeliver:
		return w.redeliver(e.Worker)
	case EvLoseResponse:
		w.svc.ArmLostResponse()
		return "armed"
	case EvCrashAfterCall:
		w.workers[e.Worker].crashAt = true
		return "armed"
	}
	return "no-op: unknown event"
}

func (w *World) step(i int) string {
	sw := w.workers[i]
	if !sw.proc.Runnable() {
		return "no-op: " + sw.proc.String()
	}
	if sw.w == nil {
		return "no-op: shut down"
	}
	r := sw.w.Step(w.ctx)
	w.stepIdle = r.Action == worker.ActionIdle
	w.stepWait = r.Wait
	w.where = string(r.Action)
	if r.Action == worker.ActionHeartbeat && r.Phase == PhaseRun {
		w.duringRun = PhaseRun
	}
	w.observe(i, r)
	out := r.String()
	if r.Called && sw.crashAt {
		sw.crashAt = false
		w.cover.fault(FaultCrashAfterCall, sw.w.Phases()...)
		out += "; " + w.crash(i)
	} else if sw.draining && sw.w.Drained() {
		out += "; " + w.exited(i)
	}
	return out
}

// redeliver delivers a worker's kept write again, late, and records it in
// the claim history if the queue accepted it.
func (w *World) redeliver(i int) string {
	late, ok := w.workers[i].queue.Redeliver()
	if !ok {
		return "no-op: nothing kept"
	}
	write, claim, err := late.Write, late.Claim, late.Err
	accepted := err == nil || errors.Is(err, model.ErrBudgetExhausted) || errors.Is(err, model.ErrStepsExhausted) ||
		errors.Is(err, model.ErrDeadlineExceeded)
	r := worker.Report{Worker: workerName(i), Action: "redeliver", TaskID: claim.TaskID, Attempt: claim.Attempt,
		Fence: claim.Fence, Write: write, Accepted: accepted, LeaseUntil: late.LeaseUntil}
	if write == "heartbeat" && err != nil && !errors.Is(err, model.ErrStaleClaim) {
		r.StorageError = true // it may have been applied
	}
	w.checker.report(r)
	w.cover.fault(FaultRedeliver, string(write))
	w.cover.refusal(err)
	if err != nil {
		return fmt.Sprintf("late %s task=%s fence=%d -> refused: %v", write, claim.TaskID, claim.Fence, err)
	}
	return fmt.Sprintf("late %s task=%s fence=%d -> accepted", write, claim.TaskID, claim.Fence)
}

func (w *World) crash(i int) string {
	sw := w.workers[i]
	if sw.stopped {
		return "no-op: shut down"
	}
	if err := sw.proc.Crash(); err != nil {
		return "no-op: " + err.Error()
	}
	sw.w, sw.exec, sw.draining = nil, nil, false
	return "crashed"
}

func (w *World) restart(i int) string {
	sw := w.workers[i]
	out := "restarted"
	if sw.stopped {
		out = "restarted after its shutdown"
	} else if err := sw.proc.Restart(); err != nil {
		return "no-op: " + err.Error()
	}
	var err error
	if sw.w, err = w.newWorker(i, sw); err != nil {
		return "error: " + err.Error()
	}
	sw.stopped, sw.draining = false, false
	return out
}

// schedulerDownTicks is how many ticks a restarted scheduler misses.
const schedulerDownTicks = 6

func (w *World) tick() string {
	var out []string
	for s := range w.schedDown {
		if w.schedDown[s] > 0 {
			w.schedDown[s]--
			out = append(out, fmt.Sprintf("s%d down", s))
			continue
		}
		res, err := w.q.EnqueueDue(w.ctx)
		if err != nil {
			out = append(out, fmt.Sprintf("s%d error: %v", s, err))
			continue
		}
		out = append(out, fmt.Sprintf("s%d enqueued %d collapsed %d refused %d", s, res.Enqueued, res.Collapsed, res.Refused))
	}
	return fmt.Sprint(out)
}

// observe takes in what worker i's step reported: the claim history, the
// timeline, anomalies and the late-result story.
func (w *World) observe(i int, r worker.Report) {
	w.checker.report(r)
	w.cover.refusal(r.Err)
	w.timelineReport(r)
	if r.Anomaly != "" {
		w.anomalies = append(w.anomalies, r.String())
	}
	w.watchLate(i, r)
}

// watchLate notes when a stalled claimant, resumed, has its late result
// refused: a stale-claim rejection, a local lease check, or a fenced
// service's refusal.
func (w *World) watchLate(i int, r worker.Report) {
	for _, t := range w.tasks {
		if !t.resumed || t.stalledBy != i || t.lateSeen || r.TaskID != t.id || r.Fence != t.stalledAt {
			continue
		}
		switch {
		case errors.Is(r.Err, model.ErrStaleClaim) || errors.Is(r.Err, worker.ErrStaleFence) ||
			r.Action == worker.ActionCheckLease && r.Outcome != "lease held":
			t.lateSeen = true
		case r.Accepted:
			t.lateAccepted = true
		}
	}
}

// task reads a task through the checker's fault-free path: the
// lockstep's copy of the real row when the oracle keeps one (it reads every
// row an operation touched, after the operation).
func (w *World) task(id string) (model.Task, error) {
	if w.q.ref != nil {
		return w.q.row(id)
	}
	var t model.Task
	var err error
	w.storage.Bypass(func() { t, err = w.q.Task(w.ctx, id) })
	return t, err
}

// script attempts the task's next scripted act. An act whose condition
// does not hold yet is a no-op.
func (w *World) script(t *taskState) string {
	if t.next >= len(t.spec.Script) {
		return "no-op: script done"
	}
	act := t.spec.Script[t.next]
	var cur model.Task
	if act != scenarios.Submit {
		var err error
		if cur, err = w.task(t.id); err != nil {
			return "no-op: " + err.Error()
		}
	}
	if cur.State.Terminal() && act != scenarios.Replay && act != scenarios.ChangePayload {
		t.next++
		return fmt.Sprintf("%s %s: missed, task is %s", t.spec.Name, act, cur.State)
	}
	if act != scenarios.Submit && w.keyExpired(t.request.User, t.request.Key) {
		t.next++
		return fmt.Sprintf("%s %s: missed, the task was pruned and its key's tombstone expired", t.spec.Name, act)
	}
	out, done := w.act(t, act, cur)
	if done {
		t.next++
	}
	return fmt.Sprintf("%s %s: %s", t.spec.Name, act, out)
}

// act performs the scripted act of task t, whose row is cur: it says what
// happened, and whether the script moves on to the task's next act.
func (w *World) act(t *taskState, act scenarios.Act, cur model.Task) (string, bool) {
	switch act {
	case scenarios.Submit, scenarios.Replay, scenarios.ChangePayload:
		return w.submitAct(t, act)
	case scenarios.RestartWhilePaused, scenarios.ApproveOutdated, scenarios.Approve, scenarios.Reject:
		return w.approvalAct(t, act, cur)
	case scenarios.LoseResponse, scenarios.StallClaimant, scenarios.LateComplete, scenarios.ResumeStalled:
		return w.lateResultAct(t, act, cur)
	}
	return w.cancelAct(t, act, cur)
}

// submitAct submits task t's request, replays it exactly, or replays it
// with a changed payload under the same key.
func (w *World) submitAct(t *taskState, act scenarios.Act) (string, bool) {
	switch act {
	case scenarios.Submit:
		if t.request.User == "" {
			t.request = t.spec.Request
			if t.spec.Deadline > 0 {
				t.request.Deadline = w.clock.Now().Add(t.spec.Deadline)
			}
			if t.spec.RunAt > 0 {
				t.request.RunAt = w.clock.Now().Add(t.spec.RunAt)
			}
		}
		res, err := w.q.Submit(w.ctx, t.request)
		w.cover.refusal(err)
		if errors.Is(err, model.ErrInvalidInput) && t.spec.Deadline > 0 {
			t.lateSubmit = true
			return "refused: the deadline passed before the submit got through: " + err.Error(), true
		}
		if err != nil {
			return "error (caller retries): " + err.Error(), false
		}
		t.id = res.TaskID
		w.checker.submitted(res.TaskID)
		return fmt.Sprintf("task %s replay=%t", res.TaskID, res.Replay), true
	case scenarios.Replay:
		res, err := w.q.Submit(w.ctx, t.request)
		w.cover.refusal(err)
		if err != nil {
			return "error (caller retries): " + err.Error(), false
		}
		w.replayed(t.request.User, t.request.Key, res)
		if !res.Replay || res.TaskID != t.id {
			t.failures = append(t.failures, fmt.Sprintf("exact replay returned %s replay=%t, want %s replay=true", res.TaskID, res.Replay, t.id))
		}
		return fmt.Sprintf("task %s replay=%t", res.TaskID, res.Replay), true
	case scenarios.ChangePayload:
		changed := t.request
		changed.Payload = `{"steps":[{"cost":1}],"changed":true}`
		res, err := w.q.Submit(w.ctx, changed)
		w.cover.refusal(err)
		switch {
		case errors.Is(err, model.ErrIdempotencyConflict):
			return "refused: " + err.Error(), true
		case err == nil:
			t.failures = append(t.failures, fmt.Sprintf("changed payload under a used key was accepted as %s", res.TaskID))
			return "accepted (wrong)", true
		}
		return "error (caller retries): " + err.Error(), false
	}
	return "no-op: not a submit", false
}

// approvalAct acts on task t at its approval gate: restarts the worker
// while it waits, approves naming an outdated version, approves or
// rejects.
func (w *World) approvalAct(t *taskState, act scenarios.Act, cur model.Task) (string, bool) {
	waiting := cur.State == model.WaitingForApproval
	switch act {
	case scenarios.RestartWhilePaused:
		if !waiting {
			return "no-op: task is " + string(cur.State), false
		}
		return "restart w0 while paused: " + w.crash(0) + ", " + w.restart(0), true
	case scenarios.ApproveOutdated:
		if !waiting {
			return "no-op: task is " + string(cur.State), false
		}
		err := w.q.Approve(w.ctx, t.id, cur.ApprovalVersion-1, approverActor)
		w.cover.refusal(err)
		if errors.Is(err, model.ErrVersionMismatch) {
			return "refused: " + err.Error(), true
		}
		if err == nil {
			t.failures = append(t.failures, "approval naming an outdated version was accepted")
			return "accepted (wrong)", true
		}
		return "error (approver retries): " + err.Error(), false
	case scenarios.Approve, scenarios.Reject:
		if !waiting {
			return "no-op: task is " + string(cur.State), false
		}
		var err error
		if act == scenarios.Approve {
			err = w.q.Approve(w.ctx, t.id, cur.ApprovalVersion, approverActor)
		} else {
			err = w.q.Reject(w.ctx, t.id, cur.ApprovalVersion, approverActor)
		}
		w.cover.refusal(err)
		if err != nil {
			return "error (approver retries): " + err.Error(), false
		}
		return fmt.Sprintf("%s version %d", act, cur.ApprovalVersion), true
	}
	return "no-op: not an approval", false
}

// lateResultAct plays the late-result story of task t: a lost response at
// its effect step, a claimant stalled past its lease, that claimant's late
// completion under its old fence, and its resumption.
func (w *World) lateResultAct(t *taskState, act scenarios.Act, cur model.Task) (string, bool) {
	switch act {
	case scenarios.LoseResponse:
		if cur.State != model.Running || cur.StepsUsed != t.spec.EffectStep {
			return "no-op: not at the effect step", false
		}
		w.svc.ArmLostResponse()
		return "next service call loses its response", true
	case scenarios.StallClaimant:
		if cur.State != model.Running || cur.StepsUsed < 1 {
			return "no-op: not running with a step done", false
		}
		for i, sw := range w.workers {
			if workerName(i) != cur.Owner {
				continue
			}
			if _, held := sw.claim(t.id, cur.Version); held && sw.proc.Stall() == nil {
				t.stalledBy, t.stalledAt = i, cur.Version
				return fmt.Sprintf("stalled %s holding fence %d", cur.Owner, cur.Version), true
			}
		}
		return "no-op: claimant cannot stall", false
	case scenarios.LateComplete:
		if t.stalledBy < 0 || !w.workers[t.stalledBy].proc.Stalled() {
			return "story interrupted: the claimant is not stalled", true
		}
		if cur.State != model.Running || cur.Version <= t.stalledAt {
			return "no-op: not running under a newer claim yet", false
		}
		sw := w.workers[t.stalledBy]
		old, held := sw.claim(t.id, t.stalledAt)
		if !held {
			return "story interrupted: the claimant no longer holds the claim", true
		}
		err := sw.queue.Complete(w.ctx, old)
		w.cover.refusal(err)
		w.checker.report(worker.Report{Worker: workerName(t.stalledBy), Action: "late_complete", TaskID: t.id,
			Attempt: old.Attempt, Fence: old.Fence, Write: "complete", Accepted: err == nil})
		if err == nil {
			t.lateAccepted = true
			return fmt.Sprintf("late completion under fence %d accepted (wrong)", old.Fence), true
		}
		t.lateSeen = t.lateSeen || errors.Is(err, model.ErrStaleClaim)
		return fmt.Sprintf("late completion under fence %d refused: %v", old.Fence, err), errors.Is(err, model.ErrStaleClaim)
	case scenarios.ResumeStalled:
		if t.stalledBy < 0 {
			return "story interrupted: nothing stalled", true
		}
		proc := w.workers[t.stalledBy].proc
		if !proc.Stalled() {
			return "story interrupted: the claimant is " + proc.String(), true
		}
		if cur.Version <= t.stalledAt && !cur.State.Terminal() {
			return "no-op: not reclaimed yet", false
		}
		if err := proc.Resume(); err != nil {
			return "no-op: " + err.Error(), false
		}
		t.resumed = true
		return fmt.Sprintf("resumed w%d with its old fence %d (task now at %d)", t.stalledBy, t.stalledAt, cur.Version), true
	}
	return "no-op: not part of the late-result story", false
}

// Package scenarios holds named workloads and the outcomes each expects.
// The simulator, the live demo and the tests run them; a scenario reads
// like a transcript: the tasks submitted, what their callers do, and where
// each must end up.
package scenarios

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/leasehold/leasehold/model"
)

// Act is one scripted action of a task's caller (or, for the stories that
// need it, of the world around the task). Each waits for its condition and
// then happens once; see the constants for the conditions.
type Act string

const (
	// Submit submits the task's request. Condition: none.
	Submit Act = "submit"
	// Replay submits the same request again; it must return the original
	// ID with replay set. Condition: submitted.
	Replay Act = "replay"
	// ChangePayload submits a changed payload under the same key; it must
	// be refused as a conflict. Condition: submitted.
	ChangePayload Act = "change_payload"
	// CancelRunning cancels the task. Condition: it is running.
	CancelRunning Act = "cancel_running"
	// RestartWhilePaused restarts a worker (crash, then start again) while
	// the task waits for approval. Condition: waiting for approval.
	RestartWhilePaused Act = "restart_while_paused"
	// ApproveOutdated approves naming a version older than the recorded
	// one; it must be refused. Condition: waiting for approval.
	ApproveOutdated Act = "approve_outdated"
	// Approve approves naming the recorded version. Condition: waiting.
	Approve Act = "approve"
	// Reject rejects the task at its gate. Condition: waiting.
	Reject Act = "reject"
	// LoseResponse makes the next effect call lose its response (the
	// service applies it; the worker sees a timeout). Condition: running
	// with the effect step next.
	LoseResponse Act = "lose_response"
	// StallClaimant stalls the worker holding the task. Condition: running
	// with at least one step done.
	StallClaimant Act = "stall_claimant"
	// ResumeStalled lets the stalled claimant carry on with its old claim.
	// Condition: another claim of the task has been accepted since.
	ResumeStalled Act = "resume_stalled"
	// LateComplete delivers the stalled claimant's completion of its old
	// claim, as a network would deliver a result sent just before the
	// stall; it must be refused by version. Condition: another claim of
	// the task is running.
	LateComplete Act = "late_complete"
	// CancelQueued cancels the task while it is queued (it ends cancelled
	// at once). Condition: queued.
	CancelQueued Act = "cancel_queued"
	// CancelWaiting cancels the task while it waits at its gate (it ends
	// cancelled at once). Condition: waiting for approval.
	CancelWaiting Act = "cancel_waiting"
	// CancelThenCrash requests cancellation of the running task and then
	// crashes its claimant, so that the reaper, not the worker, ends the
	// claim: the task must end cancelled, not requeued. Condition: running
	// under a worker's claim.
	CancelThenCrash Act = "cancel_then_crash"
)

// Expect is where a task must end up.
type Expect struct {
	State  model.State
	Reason model.Reason
	// CancelledBy and ApprovedBy, when set, must match the task's.
	CancelledBy string
	ApprovedBy  string
	// Retried: the task's audit trail shows a transient failure that was
	// charged and retried, or a lease expiry that charged the attempt the
	// failure would have spent (the synthetic handler fails a step while
	// fewer than its times attempts have been charged).
	Retried bool
	// EffectsApplied: each of the task's operations applied exactly once
	// by the external service, this many in all (AnyEffects: any number,
	// each still at most once).
	EffectsApplied int
	// LateResultRejected: when the claimant a script stalled is resumed
	// with its memory, its late result must be refused (a stale-claim
	// rejection, its own lease check, or a fenced service's refusal).
	LateResultRejected bool
}

// AnyEffects accepts any number of applied operations.
const AnyEffects = -1

// Task is one task of a scenario.
type Task struct {
	Name    string
	Request model.SubmitRequest
	// Deadline, when set, is added to the time of the first submit to make
	// the request's deadline (replays repeat that request exactly).
	Deadline time.Duration
	// RunAt, when set, is added to the time of the first submit to make
	// the request's run_at: the task is not due before it.
	RunAt  time.Duration
	Script []Act
	Expect Expect
	// Also lists other acceptable ends (a deadline may or may not pass
	// before the task finishes).
	Also []Expect
	// EffectStep is the index of the step that makes the task's effect
	// (for LoseResponse); -1 when none.
	EffectStep int
}

// Schedule is a periodic schedule the scenario adds; the simulator checks
// that every run due by the end was enqueued exactly once or collapsed.
type Schedule struct {
	Spec model.ScheduleSpec // Spec.Origin is ignored: OriginOffset sets it
	// OriginOffset, added to the simulation's start time, is the
	// schedule's origin.
	OriginOffset time.Duration
}

// Scenario is a named workload with its expected outcomes.
type Scenario struct {
	Name        string
	Description string
	Workers     int
	Concurrency int
	Lease       time.Duration
	Heartbeat   time.Duration
	AttemptsMax int
	UserLimits  []model.UserLimit
	Tasks       []Task
	Schedules   []Schedule
	// Schedulers is how many independent schedulers enqueue periodic runs
	// (the periodic scenario runs two and restarts one).
	Schedulers int
	// FaultFloors raises the rate (per mille) of some fault kinds above
	// whatever the seed's swarm mix drew: "crash", "stall", "storage_down",
	// "storage_fault", "duplicate", "lose_response", "crash_after_call".
	FaultFloors map[string]int
	// Events is the length of the random schedule before faults heal.
	Events int
	// WorkerKinds, when set, lists for each worker (by index) the kinds it
	// serves: its handler is a registry (worker.Kinds) of those kinds,
	// each run by the synthetic handler, and its claims name them. Nil:
	// every worker runs the synthetic handler and claims tasks of every
	// kind.
	WorkerKinds [][]string
	// Covers lists the cells of the coverage map (transitions, refusal
	// classes, fault kinds at phases) that a sweep of the scenario must
	// reach: in a sweep of at least CoverageSeedsMin seeds, a cell no seed
	// reached fails the sweep.
	Covers []Cell
}

// Names lists the scenarios by name.
func Names() []string {
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Get returns the scenario called name.
func Get(name string) (Scenario, error) {
	build, ok := registry[name]
	if !ok {
		return Scenario{}, fmt.Errorf("unknown scenario %q (want one of %v)", name, Names())
	}
	return build(), nil
}

var registry = map[string]func() Scenario{
	"portfolio":      Portfolio,
	"late-result":    LateResult,
	"storage-outage": StorageOutage,
	"crash-storm":    CrashStorm,
	"quota":          Quota,
	"deadline":       Deadline,
	"periodic":       Periodic,
	"boundaries":     Boundaries,
	"long-running":   LongRunning,
}

// cancelPayload is thirty two-second steps: longer than the random part of
// a run, so its caller always finds it running.
var cancelPayload = `{"steps":[` + strings.TrimSuffix(strings.Repeat(`{"cost":1,"duration_ms":2000},`, 30), ",") + `]}`

// request builds a submit request for the scenario's tasks.
func request(user, key, payload string, costBudget int64, stepsMax int) model.SubmitRequest {
	return model.SubmitRequest{User: user, Key: key, Payload: payload, CostBudget: costBudget, StepsMax: stepsMax}
}

// ofKind returns task with its request naming kind.
func ofKind(kind string, task Task) Task {
	task.Request.Kind = kind
	return task
}

// Served returns the kinds worker i serves (WorkerKinds), and nil when it
// serves every kind.
func (s Scenario) Served(i int) []string {
	if i < 0 || i >= len(s.WorkerKinds) {
		return nil
	}
	return s.WorkerKinds[i]
}

// Portfolio is the assignment's workload: ten synthetic tasks, two workers.
// One waits for approval and a worker is restarted while it is paused; one
// exceeds its budget; one is cancelled while running; one fails
// transiently then succeeds; one fails permanently; one makes an effect
// whose response is lost; two belong to one user under a limit of 1; one
// is submitted twice exactly and once with a changed payload.
func Portfolio() Scenario {
	return Scenario{
		Name:        "portfolio",
		Description: "ten synthetic tasks over two workers: approval, budget, cancellation, retries, a lost response, a per-user limit, duplicate submission",
		Covers: cells(common(),
			transitions("running failed failed", "running retry queued", "running dead_lettered needs_review",
				"running lease_expired needs_review", "running uncertain needs_review", "running paused waiting_for_approval",
				"running cancelled cancelled", "running lease_expired cancelled", "waiting_for_approval approved queued"),
			refusals("conflict", "version_mismatch"),
			faults("crash@next", "stall@next", "shutdown@next", "crash@work", "crash_after_call@receipt", "crash_after_call@reconcile", "lose_response@call",
				"duplicate@step", "redeliver@heartbeat", "shutdown@work", "stall@work", "ambiguous_commit@caller", "fail_begin@caller", "fail_statement@claim"),
			protocolPaths(), groupPaths()),
		Workers:     2,
		Concurrency: 2,
		Lease:       2 * time.Second,
		Heartbeat:   500 * time.Millisecond,
		AttemptsMax: 4,
		UserLimits:  []model.UserLimit{{User: "lena", RunningMax: 1, DepthMax: model.Inherit}},
		Events:      400,
		// The batch caller and the operator's prunes in every seed, so
		// that pruned tasks' keys are submitted again inside and after
		// their tombstones' window.
		// Group events in every seed too.
		FaultFloors: map[string]int{"batch": 20, "prune": 20, "group": 20},
		Tasks: []Task{
			{Name: "approval", EffectStep: -1,
				Request: request("ana", "approval-1", `{"steps":[{"cost":1},{"approval":"manager"},{"cost":2}]}`, 10, 5),
				Script:  []Act{Submit, RestartWhilePaused, ApproveOutdated, Approve},
				Expect:  Expect{State: model.Completed, ApprovedBy: "manager"}},
			{Name: "budget", EffectStep: 2,
				Request: request("bo", "budget-1", `{"steps":[{"cost":4},{"cost":4},{"cost":4,"effect":"charge"}]}`, 10, 5),
				Script:  []Act{Submit},
				Expect:  Expect{State: model.Failed, Reason: model.BudgetExhausted, EffectsApplied: 0}},
			{Name: "cancel", EffectStep: -1,
				Request: request("cy", "cancel-1", cancelPayload, 100, 40),
				Script:  []Act{Submit, CancelRunning},
				Expect:  Expect{State: model.Cancelled, Reason: model.CancelledByCaller, CancelledBy: "cy"}},
			{Name: "transient", EffectStep: -1,
				Request: request("dee", "transient-1", `{"steps":[{"cost":1},{"cost":1,"fail":"transient","times":1},{"cost":1}]}`, 10, 5),
				Script:  []Act{Submit},
				Expect:  Expect{State: model.Completed, Retried: true}},
			{Name: "permanent", EffectStep: -1,
				Request: request("eve", "permanent-1", `{"steps":[{"cost":1},{"cost":1,"fail":"permanent"}]}`, 10, 5),
				Script:  []Act{Submit},
				Expect:  Expect{State: model.Failed, Reason: model.PermanentError}},
			{Name: "effect", EffectStep: 1,
				Request: request("fay", "effect-1", `{"steps":[{"cost":2},{"cost":5,"effect":"charge"},{"cost":1}]}`, 10, 5),
				Script:  []Act{Submit, LoseResponse},
				Expect:  Expect{State: model.Completed, EffectsApplied: 1}},
			{Name: "limit-a", EffectStep: -1,
				Request: request("lena", "limit-a", `{"steps":[{"cost":1,"duration_ms":800},{"cost":1,"duration_ms":800}]}`, 10, 5),
				Script:  []Act{Submit},
				Expect:  Expect{State: model.Completed}},
			{Name: "limit-b", EffectStep: -1,
				Request: request("lena", "limit-b", `{"steps":[{"cost":1,"duration_ms":800},{"cost":1,"duration_ms":800}]}`, 10, 5),
				Script:  []Act{Submit},
				Expect:  Expect{State: model.Completed}},
			{Name: "duplicate", EffectStep: -1,
				Request: request("gus", "duplicate-1", `{"steps":[{"cost":1},{"cost":1}]}`, 10, 5),
				Script:  []Act{Submit, Replay, ChangePayload},
				Expect:  Expect{State: model.Completed}},
			{Name: "notify", EffectStep: 1,
				Request: request("hal", "notify-1", `{"steps":[{"cost":1},{"cost":1,"effect":"notify"}]}`, 10, 5),
				Script:  []Act{Submit},
				Expect:  Expect{State: model.Completed, EffectsApplied: 1}},
		},
	}
}

// LateResult is the workshop's exercise: the claimant is killed (stalled,
// keeping its memory), its lease expires under the fake clock, another
// worker takes the task over, and the first delivers a late result that is
// rejected by version.
func LateResult() Scenario {
	return Scenario{
		Name:        "late-result",
		Description: "a stalled claimant's late result is rejected by version after another worker takes over",
		Covers: cells(common(),
			transitions("running dead_lettered needs_review", "running lease_expired needs_review"),
			faults("crash@work", "stall@work", "shutdown@work", "fail_statement@claim")),
		Workers:     2,
		Concurrency: 1,
		Lease:       2 * time.Second,
		Heartbeat:   500 * time.Millisecond,
		AttemptsMax: 4,
		Events:      250,
		Tasks: []Task{
			{Name: "report", EffectStep: 2,
				Request: request("ana", "report-1", `{"steps":[{"cost":1,"duration_ms":500},{"cost":1,"duration_ms":500},{"cost":3,"effect":"publish"},{"cost":1,"duration_ms":500},{"cost":1,"duration_ms":500},{"cost":1,"duration_ms":500}]}`, 20, 8),
				Script:  []Act{Submit, StallClaimant, LateComplete, ResumeStalled},
				Expect:  Expect{State: model.Completed, EffectsApplied: 1, LateResultRejected: true}},
		},
	}
}

// simple is a task that should just complete.
func simple(name, user, payload string, effects int) Task {
	return Task{Name: name, EffectStep: -1, Request: request(user, name, payload, 50, 20),
		Script: []Act{Submit}, Expect: Expect{State: model.Completed, EffectsApplied: effects}}
}

// StorageOutage runs ordinary work through long and frequent storage
// outages and injected storage errors (busy, I/O, failed and ambiguous
// commits): every submit is durable or refused, never falsely accepted,
// and everything completes once storage returns.
func StorageOutage() Scenario {
	return Scenario{
		Name:        "storage-outage",
		Description: "storage unavailable for long windows and failing at begin, statement and commit",
		Workers:     2, Concurrency: 2, Lease: 2 * time.Second, Heartbeat: 500 * time.Millisecond,
		AttemptsMax: 4, Events: 350,
		Covers: cells(common(),
			transitions("running retry queued", "running dead_lettered needs_review", "needs_review resolved failed"),
			refusals("conflict"),
			faults("crash@next", "stall@next", "shutdown@next", "unavailable@caller", "unavailable@step", "unavailable@fail", "unavailable@redeliver",
				"ambiguous_commit@caller", "ambiguous_commit@claim", "ambiguous_commit@operator",
				"ambiguous_commit@reap", "busy@caller", "busy@claim", "fail_begin@caller", "fail_begin@claim",
				"fail_commit@caller", "fail_commit@claim", "fail_commit@reap",
				"fail_statement@claim", "fail_statement@reap")),
		FaultFloors: map[string]int{"storage_down": 40, "storage_fault": 60},
		Tasks: []Task{
			simple("ledger-1", "ana", `{"steps":[{"cost":1},{"cost":2,"effect":"post"},{"cost":1}]}`, 1),
			simple("ledger-2", "bo", `{"steps":[{"cost":1,"duration_ms":300},{"cost":2,"effect":"post"}]}`, 1),
			simple("report-1", "cy", `{"steps":[{"cost":1},{"cost":1},{"cost":1},{"cost":1}]}`, 0),
			simple("report-2", "cy", `{"steps":[{"cost":1,"duration_ms":500},{"cost":1,"duration_ms":500}]}`, 0),
			{Name: "dup", EffectStep: -1, Request: request("dee", "dup", `{"steps":[{"cost":1}]}`, 5, 5),
				Script: []Act{Submit, Replay, ChangePayload}, Expect: Expect{State: model.Completed}},
			deadLetter("dan"),
		},
	}
}

// CrashStorm crashes and restarts workers often, including between an
// external call and its receipt: no effect is applied twice and every task
// completes (or is recovered by the operator) once the storm passes.
func CrashStorm() Scenario {
	return Scenario{
		Name:        "crash-storm",
		Description: "workers crash and restart often, also right after an external call",
		Workers:     3, Concurrency: 2, Lease: 2 * time.Second, Heartbeat: 500 * time.Millisecond,
		AttemptsMax: 6, Events: 1000,
		Covers: cells(common(),
			transitions("running retry queued", "running dead_lettered needs_review", "running lease_expired needs_review",
				"running uncertain needs_review", "needs_review resolved failed"),
			faults("crash@next", "stall@next", "shutdown@next", "crash@call", "crash@send", "crash@reconcile", "crash@work", "crash_after_call@receipt",
				"crash_after_call@reconcile", "crash_after_call@work", "crash_after_call@uncertain", "crash_after_call@call",
				"crash_after_call@next", "lose_response@call", "duplicate@effect_intent", "redeliver@effect_intent",
				"stall@work", "shutdown@work")),
		FaultFloors: map[string]int{"crash": 50, "crash_after_call": 60, "stall": 15},
		Tasks: []Task{
			simple("pay-1", "ana", `{"steps":[{"cost":1},{"cost":3,"effect":"pay"},{"cost":1}]}`, 1),
			simple("pay-2", "bo", `{"steps":[{"cost":3,"effect":"pay"},{"cost":3,"effect":"refund"}]}`, 2),
			simple("mail-1", "cy", `{"steps":[{"cost":1,"duration_ms":400},{"cost":1,"effect":"mail"}]}`, 1),
			simple("mail-2", "dee", `{"steps":[{"cost":1,"effect":"mail"},{"cost":1,"duration_ms":400}]}`, 1),
			simple("batch", "eve", `{"steps":[{"cost":1,"duration_ms":300},{"cost":1,"duration_ms":300},{"cost":1,"duration_ms":300},{"cost":1,"effect":"notify"}]}`, 1),
			deadLetter("dan"),
		},
	}
}

// Quota puts many tasks of a few users under running limits and depth caps:
// no user ever runs more than its limit, submits beyond a user's depth cap
// are refused (the caller retries later) and nothing refused is half
// written.
func Quota() Scenario {
	tasks := []Task{}
	for i := 1; i <= 4; i++ {
		tasks = append(tasks, simple(fmt.Sprintf("solo-%d", i), "solo", `{"steps":[{"cost":1,"duration_ms":400},{"cost":1,"duration_ms":400}]}`, 0))
	}
	for i := 1; i <= 4; i++ {
		tasks = append(tasks, simple(fmt.Sprintf("pair-%d", i), "pair", `{"steps":[{"cost":1,"duration_ms":300},{"cost":1,"effect":"bill"}]}`, 1))
	}
	for i := 1; i <= 3; i++ {
		tasks = append(tasks, simple(fmt.Sprintf("free-%d", i), "free", `{"steps":[{"cost":1},{"cost":1}]}`, 0))
	}
	tasks = append(tasks, deadLetter("dan"))
	return Scenario{
		Name:        "quota",
		Description: "per-user running limits (1 and 2) and per-user depth caps under load",
		Workers:     3, Concurrency: 3, Lease: 2 * time.Second, Heartbeat: 500 * time.Millisecond,
		AttemptsMax: 5, Events: 500,
		Covers: cells(common(),
			transitions("running retry queued", "running dead_lettered needs_review", "running lease_expired needs_review",
				"running uncertain needs_review", "needs_review resolved failed"),
			faults("crash@next", "stall@next", "shutdown@next", "crash@work", "shutdown@work", "stall@work", "duplicate@fail", "redeliver@heartbeat", "unavailable@caller", "unavailable@step")),
		UserLimits: []model.UserLimit{
			{User: "solo", RunningMax: 1, DepthMax: 2},
			{User: "pair", RunningMax: 2, DepthMax: 3},
		},
		Tasks: tasks,
	}
}

// Deadline gives tasks deadlines that may pass while they are queued,
// running or waiting for an approval that never comes: a task past its
// deadline fails with deadline_exceeded and no step is charged after it.
func Deadline() Scenario {
	long := `{"steps":[{"cost":1,"duration_ms":1000},{"cost":1,"duration_ms":1000},{"cost":1,"duration_ms":1000},{"cost":1,"duration_ms":1000}]}`
	late := Expect{State: model.Failed, Reason: model.DeadlineExceeded, EffectsApplied: AnyEffects}
	return Scenario{
		Name:        "deadline",
		Description: "deadlines passing while tasks are queued, running and waiting",
		Workers:     2, Concurrency: 2, Lease: 2 * time.Second, Heartbeat: 500 * time.Millisecond,
		AttemptsMax: 4, Events: 300,
		Covers: cells(common(),
			transitions("running retry queued", "running dead_lettered needs_review", "running lease_expired needs_review",
				"running paused waiting_for_approval", "queued deadline_exceeded failed", "running deadline_exceeded failed",
				"waiting_for_approval deadline_exceeded failed", "needs_review resolved failed"),
			refusals("deadline"),
			faults("crash@next", "stall@next", "shutdown@next", "duplicate@fail")),
		Tasks: []Task{
			{Name: "tight", EffectStep: -1, Request: request("ana", "tight", long, 20, 10), Deadline: 1500 * time.Millisecond,
				Script: []Act{Submit}, Expect: late, Also: []Expect{{State: model.Completed}}},
			{Name: "roomy", EffectStep: -1, Request: request("bo", "roomy", `{"steps":[{"cost":1},{"cost":1}]}`, 20, 10), Deadline: 10 * time.Minute,
				Script: []Act{Submit}, Expect: Expect{State: model.Completed}, Also: []Expect{late}},
			{Name: "unapproved", EffectStep: -1, Request: request("cy", "unapproved", `{"steps":[{"cost":1},{"approval":"board"},{"cost":1}]}`, 20, 10),
				Deadline: 20 * time.Second, Script: []Act{Submit}, Expect: late},
			{Name: "effect", EffectStep: 1, Request: request("dee", "effect", `{"steps":[{"cost":1,"duration_ms":800},{"cost":1,"effect":"ship"},{"cost":1,"duration_ms":800}]}`, 20, 10),
				Deadline: 3 * time.Second, Script: []Act{Submit}, Expect: late, Also: []Expect{{State: model.Completed, EffectsApplied: 1}}},
			deadLetter("dan"),
		},
	}
}

// Periodic runs an anchored schedule under two schedulers that tick
// independently, one of them restarted (down for a while), across clock
// jumps: each run (schedule, k) is enqueued at most once, missed runs are
// collapsed into the latest, and every run enqueued completes.
func Periodic() Scenario {
	return Scenario{
		Name:        "periodic",
		Description: "an anchored schedule under two schedulers, a scheduler restart and clock jumps",
		Workers:     2, Concurrency: 2, Lease: 2 * time.Second, Heartbeat: 500 * time.Millisecond,
		AttemptsMax: 4, Events: 350, Schedulers: 2,
		Covers: cells(common(),
			transitions("running retry queued", "running dead_lettered needs_review", "running lease_expired needs_review",
				"running uncertain needs_review", "needs_review resolved failed"),
			faults("crash@next", "stall@next", "shutdown@next", "unavailable@enqueue_due", "lose_response@call", "crash_after_call@receipt", "duplicate@effect_intent",
				"duplicate@fail", "redeliver@fail")),
		Schedules: []Schedule{{OriginOffset: time.Second, Spec: model.ScheduleSpec{User: "cron",
			Payload: `{"steps":[{"cost":1},{"cost":1,"effect":"digest"}]}`, CostBudget: 10, StepsMax: 5, Period: 2 * time.Second}}},
		Tasks: []Task{simple("adhoc", "ana", `{"steps":[{"cost":1},{"cost":1}]}`, 0), deadLetter("dan")},
	}
}

// deadLetter is a task whose transient failures outnumber any attempts:
// every claim fails its second step, so it is dead-lettered, requeued by
// the operator with fresh attempts, dead-lettered again, and resolved as
// failed once the operator's recoveries run out.
func deadLetter(user string) Task {
	return Task{Name: "dead-letter", EffectStep: -1,
		Request: request(user, "dead-letter", `{"steps":[{"cost":1},{"cost":1,"fail":"transient","times":100}]}`, 50, 10),
		Script:  []Act{Submit}, Expect: Expect{State: model.Failed, Reason: model.OperatorResolved}}
}

// careless is a task the careless client takes first (its priority is the
// highest): plain steps, no effects, gates or failures, so the client can
// run it without the handler. Whether the client or a worker runs it, it
// ends the same way: the client's step over the limit is refused by the
// queue, a worker's is stopped by its own pre-check.
func careless(name string, payload string, costBudget int64, stepsMax int, expect Expect) Task {
	r := request("carla", name, payload, costBudget, stepsMax)
	r.Priority = 9
	return Task{Name: name, EffectStep: -1, Request: r, Script: []Act{Submit}, Expect: expect}
}

// Boundaries puts tasks on every boundary the schedules seek: a task due
// at a run_at with a deadline soon after; cancellation while queued,
// while waiting at a gate, and while running just before the claimant
// crashes; a rejection at a gate; a task whose transient failures
// outnumber its attempts; and
// two tasks for the careless client, which writes under its own claims
// without the worker's budget, step-limit and lease pre-checks, so that
// the queue's refusals are what stop it.
func Boundaries() Scenario {
	cancelled := Expect{State: model.Cancelled, Reason: model.CancelledByCaller, CancelledBy: "cy"}
	return Scenario{
		Name:        "boundaries",
		Description: "run_at and deadline instants, cancellation while queued, waiting and running (then a crash), dead letters, a careless client",
		Workers:     2, Concurrency: 2, Lease: 2 * time.Second, Heartbeat: 500 * time.Millisecond,
		AttemptsMax: 3, Events: 350,
		FaultFloors: map[string]int{"boundary": 30, "careless": 30, "limits": 10, "shutdown": 8},
		Covers: cells(common(),
			transitions("queued cancelled cancelled", "running failed failed", "running retry queued",
				"running dead_lettered needs_review", "running lease_expired needs_review", "running paused waiting_for_approval",
				"running cancelled cancelled", "running lease_expired cancelled", "waiting_for_approval rejected cancelled",
				"waiting_for_approval cancelled cancelled", "queued deadline_exceeded failed", "running deadline_exceeded failed",
				"needs_review resolved failed"),
			refusals("budget", "steps"),
			faults("crash@next", "stall@next", "shutdown@next", "crash@work", "shutdown@work", "redeliver@heartbeat")),
		Tasks: []Task{
			{Name: "later", EffectStep: -1, Request: request("ana", "later", `{"steps":[{"cost":1,"duration_ms":700},{"cost":1,"duration_ms":700}]}`, 10, 5),
				RunAt: 3 * time.Second, Deadline: 6 * time.Second, Script: []Act{Submit},
				Expect: Expect{State: model.Completed}, Also: []Expect{{State: model.Failed, Reason: model.DeadlineExceeded}}},
			{Name: "cancel-queued", EffectStep: -1, Request: request("cy", "cancel-queued", cancelPayload, 100, 40),
				RunAt: 4 * time.Second, Script: []Act{Submit, CancelQueued}, Expect: cancelled},
			{Name: "cancel-waiting", EffectStep: -1, Request: request("cy", "cancel-waiting", `{"steps":[{"cost":1},{"approval":"board"},{"cost":1}]}`, 10, 5),
				Script: []Act{Submit, CancelWaiting}, Expect: cancelled},
			{Name: "cancel-crash", EffectStep: -1, Request: request("cy", "cancel-crash", cancelPayload, 100, 40),
				Script: []Act{Submit, CancelThenCrash}, Expect: cancelled},
			{Name: "rejected", EffectStep: -1, Request: request("eve", "rejected", `{"steps":[{"approval":"board"},{"cost":1}]}`, 10, 5),
				Script: []Act{Submit, Reject}, Expect: Expect{State: model.Cancelled, Reason: model.ApprovalRejected}},
			deadLetter("dan"),
			careless("careless-budget", `{"steps":[{"cost":3},{"cost":3},{"cost":3}]}`, 7, 5,
				Expect{State: model.Failed, Reason: model.BudgetExhausted}),
			careless("careless-steps", `{"steps":[{"cost":1},{"cost":1},{"cost":1}]}`, 10, 2,
				Expect{State: model.Failed, Reason: model.StepsExhausted}),
		},
	}
}

// Kinds of the long-running scenario's tasks besides the synthetic one.
// Each is served by one worker only; the synthetic kind (the world's own
// callers' tasks) by both.
const (
	KindRender = "render"
	KindRelay  = "relay"
)

// LongRunning runs handlers whose step runs outlast the lease: the worker
// heartbeats while each runs, through storage faults that hit those
// heartbeats; a caller cancels a task mid-run; crashes, stalls and
// shutdowns land mid-run; and one step outlasts its own timeout on every
// attempt (a transient failure each time, dead-lettered, resolved by the
// operator). Runs begin and end as events of the schedule, in simulated
// time, so everything else lands between them. Its tasks are of three
// kinds over two workers that serve different kinds: render and relay
// each by one worker alone, synthetic by both; a worker sits idle while
// only the other's kind is queued, and a crashed worker's kind waits for
// its restart.
func LongRunning() Scenario {
	return Scenario{
		Name: "long-running",
		Description: "step runs longer than the lease, kept by heartbeats through storage faults; " +
			"cancellation, crashes, stalls and shutdowns mid-run; a step that outlasts its timeout; " +
			"three kinds over two workers serving different kinds",
		Workers: 2, Concurrency: 2, Lease: 2 * time.Second, Heartbeat: 500 * time.Millisecond,
		AttemptsMax: 4, Events: 400,
		WorkerKinds: [][]string{{KindRender, model.KindSynthetic}, {KindRelay, model.KindSynthetic}},
		FaultFloors: map[string]int{"storage_down": 15, "storage_fault": 30, "crash": 8, "stall": 8},
		Covers: cells(common(),
			transitions("running cancelled cancelled", "running retry queued", "running dead_lettered needs_review",
				"running lease_expired needs_review", "needs_review resolved failed"),
			runs("returned", "outlived_lease", "cancel_requested", "timeout", "lease_lost"),
			faults("crash@work", "stall@work", "shutdown@work", "unavailable@work", "fail_commit@work", "ambiguous_commit@work",
				"redeliver@heartbeat"),
			taskKinds(ClaimedKind(KindRender), ClaimedKind(KindRelay), ClaimedKind(model.KindSynthetic),
				KindIdleOthersQueued, KindClaimSeveral)),
		Tasks: []Task{
			ofKind(KindRender, simple("marathon", "ana", `{"steps":[{"cost":1,"duration_ms":5000},{"cost":1,"duration_ms":3000}]}`, 0)),
			simple("publish", "bo", `{"steps":[{"cost":1,"duration_ms":3000},{"cost":2,"effect":"publish"},{"cost":1,"duration_ms":2500}]}`, 1),
			ofKind(KindRelay, simple("relay", "cy", `{"steps":[{"cost":1,"duration_ms":4500}]}`, 0)),
			ofKind(KindRender, Task{Name: "cancel-mid-run", EffectStep: -1, Request: request("dee", "cancel-mid-run", `{"steps":[{"cost":1,"duration_ms":30000}]}`, 10, 5),
				Script: []Act{Submit, CancelRunning},
				Expect: Expect{State: model.Cancelled, Reason: model.CancelledByCaller, CancelledBy: "dee"}}),
			ofKind(KindRelay, Task{Name: "overdue", EffectStep: -1, Request: request("eve", "overdue", `{"steps":[{"cost":1,"duration_ms":4000,"timeout_ms":3000},{"cost":1}]}`, 50, 10),
				Script: []Act{Submit}, Expect: Expect{State: model.Failed, Reason: model.OperatorResolved}}),
		},
	}
}

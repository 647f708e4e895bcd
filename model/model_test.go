package model

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBackoffDelayBounds(t *testing.T) {
	b := Backoff{Base: time.Second, Max: 5 * time.Minute}
	draws := []uint64{0, 1, 499, 500, 501, 1 << 32, math.MaxUint64}
	r := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		draws = append(draws, r.Uint64())
	}
	for charged := 1; charged <= 70; charged++ {
		full := time.Second << min(charged-1, 20)
		if full > b.Max || full <= 0 {
			full = b.Max
		}
		for _, draw := range draws {
			d := b.Delay(charged, draw)
			require.GreaterOrEqual(t, d, full/2, "charged %d draw %d", charged, draw)
			require.LessOrEqual(t, d, full, "charged %d draw %d", charged, draw)
			require.Zero(t, d%time.Millisecond, "whole milliseconds")
		}
		require.Equal(t, full/2, b.Delay(charged, 0), "a zero draw waits half")
		require.Equal(t, full, b.Delay(charged, uint64(full.Milliseconds()-full.Milliseconds()/2)), "the largest draw waits all")
	}
}

func TestBackoffDelayExact(t *testing.T) {
	b := Backoff{Base: 100 * time.Millisecond, Max: time.Second}
	require.Equal(t, 50*time.Millisecond, b.Delay(1, 0))
	require.Equal(t, 100*time.Millisecond, b.Delay(1, 50))
	require.Equal(t, 50*time.Millisecond, b.Delay(1, 51), "the draw wraps within the span")
	require.Equal(t, 100*time.Millisecond, b.Delay(2, 0))
	require.Equal(t, 200*time.Millisecond, b.Delay(3, 0))
	require.Equal(t, 400*time.Millisecond, b.Delay(4, 0))
	require.Equal(t, 500*time.Millisecond, b.Delay(5, 0), "1.6 s capped to 1 s")
	require.Equal(t, time.Second, b.Delay(5, 500))
	require.Equal(t, b.Delay(1, 0), b.Delay(0, 0), "charged below 1 counts as 1")
	require.Equal(t, b.Delay(1, 7), b.Delay(-5, 7))
}

func TestBackoffNoOverflow(t *testing.T) {
	for _, b := range []Backoff{
		DefaultBackoff,
		{Base: time.Millisecond, Max: math.MaxInt64},
		{Base: math.MaxInt64, Max: math.MaxInt64},
		{Base: time.Hour, Max: time.Millisecond}, // max below base: base wins
		{},                                       // zero: 1 ms
	} {
		for _, charged := range []int{1, 2, 62, 63, 64, 100, 1 << 20, math.MaxInt} {
			for _, draw := range []uint64{0, math.MaxUint64} {
				d := b.Delay(charged, draw)
				require.Positive(t, int64(d)+1, "backoff %+v charged %d: negative delay %d", b, charged, d)
				ceiling := max(b.Max, b.Base, time.Millisecond)
				require.LessOrEqual(t, d, ceiling, "backoff %+v charged %d", b, charged)
			}
		}
	}
	require.Equal(t, time.Hour, Backoff{Base: time.Hour, Max: time.Millisecond}.Delay(1, 1_800_000))
}

func TestTransitionTable(t *testing.T) {
	rows := Transitions()
	seen := map[Transition]bool{}
	from := map[State]bool{}
	to := map[State]bool{}
	actions := map[Action]bool{}
	for _, tr := range rows {
		require.False(t, seen[tr], "duplicate row %+v", tr)
		seen[tr] = true
		require.True(t, tr.From.Valid() && tr.To.Valid(), "%+v", tr)
		require.False(t, tr.From.Terminal(), "terminal state %s has an outgoing transition", tr.From)
		require.NotEqual(t, tr.From, tr.To, "%+v", tr)
		require.Equal(t, tr.Action == ActRetry || tr.Action == ActDeadLetter, tr.Charged, "%+v", tr)
		from[tr.From], to[tr.To], actions[tr.Action] = true, true, true
	}
	for _, s := range States() {
		require.Equal(t, !s.Terminal(), from[s], "state %s: outgoing transitions", s)
		require.True(t, to[s] || s == Queued, "state %s is never reached", s)
	}
	declared := declaredActions(t)
	require.Len(t, declared, 15, "the Action constants transition.go declares")
	for _, a := range declared {
		require.True(t, actions[a], "action %s has no row in Transitions()", a)
	}
	for _, s := range States() {
		require.True(t, AllowedMove(s, s), "staying is allowed")
		if s.Terminal() {
			for _, other := range States() {
				require.Equal(t, s == other, AllowedMove(s, other), "%s -> %s", s, other)
			}
		}
	}
}

// TestTransitionTableRows checks rows of DESIGN.md's state table by name,
// allowed and refused, so a row dropped from or added to Transitions() is
// noticed.
func TestTransitionTableRows(t *testing.T) {
	for _, tc := range []struct {
		from   State
		action Action
		to     State
	}{
		{Queued, ActClaim, Running},
		{Queued, ActCancel, Cancelled},
		{Running, ActComplete, Completed},
		{Running, ActRetry, Queued},
		{Running, ActDeadLetter, NeedsReview},
		{Running, ActUncertain, NeedsReview},
		{Running, ActPause, WaitingForApproval},
		{Running, ActRelease, Queued},
		{Running, ActObserveCancel, Cancelled},
		{WaitingForApproval, ActApprove, Queued},
		{WaitingForApproval, ActReject, Cancelled},
		{WaitingForApproval, ActCancel, Cancelled},
		{Queued, ActDeadline, Failed},
		{Running, ActDeadline, Failed},
		{WaitingForApproval, ActDeadline, Failed},
		{NeedsReview, ActRequeue, Queued},
		{NeedsReview, ActResolve, Completed},
		{NeedsReview, ActResolve, Cancelled},
	} {
		require.True(t, Allows(tc.from, tc.action, tc.to), "%s --%s--> %s", tc.from, tc.action, tc.to)
		require.True(t, AllowedMove(tc.from, tc.to), "%s -> %s", tc.from, tc.to)
	}
	require.False(t, Allows(Queued, ActComplete, Completed))
	require.False(t, Allows(WaitingForApproval, ActClaim, Running))
	require.False(t, Allows(NeedsReview, ActResolve, Queued), "resolve settles; requeue is its own action")
	require.False(t, Allows(Running, ActCancel, Cancelled), "a running task is cancelled only when the worker observes it")
	require.False(t, Allows(Running, ActRelease, NeedsReview))
	require.False(t, Allows(WaitingForApproval, ActApprove, Running), "an approved task is queued again, not running")
	require.False(t, Allows(Completed, ActRequeue, Queued), "terminal states never change")
	require.False(t, AllowedMove(Queued, Completed))
	require.False(t, AllowedMove(Queued, NeedsReview))
	require.False(t, AllowedMove(NeedsReview, Running))
	require.False(t, AllowedMove(WaitingForApproval, Running))
	require.False(t, AllowedMove(Failed, Queued))
}

// declaredActions returns the constants of type Action declared in
// transition.go, read from its source so a constant added without a row
// in Transitions() is noticed.
func declaredActions(t *testing.T) []Action {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), "transition.go", nil, 0)
	require.NoError(t, err)
	var out []Action
	for _, decl := range file.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			if typ, ok := vs.Type.(*ast.Ident); !ok || typ.Name != "Action" {
				continue
			}
			for _, v := range vs.Values {
				lit, ok := v.(*ast.BasicLit)
				require.True(t, ok && lit.Kind == token.STRING, "Action constant %s is not a string literal", vs.Names[0].Name)
				value, err := strconv.Unquote(lit.Value)
				require.NoError(t, err)
				out = append(out, Action(value))
			}
		}
	}
	return out
}

func TestStatesAndReasons(t *testing.T) {
	require.Len(t, States(), 7)
	for _, s := range States() {
		got, err := ParseState(string(s))
		require.NoError(t, err)
		require.Equal(t, s, got)
		require.Equal(t, s == Queued || s == Running || s == WaitingForApproval, s.Active())
	}
	_, err := ParseState("paused")
	require.ErrorContains(t, err, `"paused"`)
	require.False(t, State("").Valid())
	require.Len(t, Reasons(), 9)
	require.True(t, NoReason.Valid())
	for _, r := range Reasons() {
		require.True(t, r.Valid())
		require.NotEmpty(t, r)
	}
	require.False(t, Reason("tired").Valid())
}

// validTask returns a consistent task in state s.
func validTask(s State) Task {
	t := Task{ID: "t_1", State: s, Version: 2, Attempt: 2, AttemptsMax: 3, AttemptsCharged: 1, AttemptsFailed: 1,
		CostBudget: 10, CostUsed: 4, StepsMax: 5, StepsUsed: 2}
	switch s {
	case Running:
		t.Owner, t.LeaseUntil = "w1", testEpoch
	case WaitingForApproval:
		t.ApprovalGate, t.ApprovalVersion = "manager", 2
	case NeedsReview:
		t.Reason = AttemptsExhausted
	case Failed:
		t.Reason = PermanentError
	case Cancelled:
		t.Reason, t.CancelledBy = CancelledByCaller, "caller"
	}
	return t
}

func TestCheckTaskCatchesEachInvariant(t *testing.T) {
	for _, s := range States() {
		require.Empty(t, CheckTask(validTask(s)), "valid %s task", s)
	}
	for _, tc := range []struct {
		name    string
		state   State
		corrupt func(*Task)
		want    string
	}{
		{"unknown state", Queued, func(t *Task) { t.State = "paused" }, InvStateValid},
		{"queued with reason", Queued, func(t *Task) { t.Reason = PermanentError }, InvReasonMatches},
		{"failed without reason", Failed, func(t *Task) { t.Reason = NoReason }, InvReasonMatches},
		{"failed cancelled_by_caller", Failed, func(t *Task) { t.Reason = CancelledByCaller }, InvReasonMatches},
		{"review approval_rejected", NeedsReview, func(t *Task) { t.Reason = ApprovalRejected }, InvReasonMatches},
		{"unknown reason", Cancelled, func(t *Task) { t.Reason = "tired" }, InvReasonMatches},
		{"queued with owner", Queued, func(t *Task) { t.Owner = "w1" }, InvLeaseHeld},
		{"queued with lease", Queued, func(t *Task) { t.LeaseUntil = testEpoch }, InvLeaseHeld},
		{"running without owner", Running, func(t *Task) { t.Owner = "" }, InvLeaseHeld},
		{"running without lease", Running, func(t *Task) { t.LeaseUntil = time.Time{} }, InvLeaseHeld},
		{"waiting with lease", WaitingForApproval, func(t *Task) { t.Owner, t.LeaseUntil = "w1", testEpoch }, InvLeaseHeld},
		{"overspent", Running, func(t *Task) { t.CostUsed = 11 }, InvBudget},
		{"negative cost", Running, func(t *Task) { t.CostUsed = -1 }, InvBudget},
		{"too many steps", Running, func(t *Task) { t.StepsUsed = 6 }, InvSteps},
		{"negative steps", Running, func(t *Task) { t.StepsUsed = -1 }, InvSteps},
		{"too many attempts", Queued, func(t *Task) { t.AttemptsCharged = 4 }, InvAttempts},
		{"negative attempts", Queued, func(t *Task) { t.AttemptsCharged = -1 }, InvAttempts},
		{"fewer failures than charged attempts", Queued, func(t *Task) { t.AttemptsFailed = 0 }, InvAttempts},
		{"approval version stale", WaitingForApproval, func(t *Task) { t.ApprovalVersion = 1 }, InvApprovalVersion},
		{"approval gate missing", WaitingForApproval, func(t *Task) { t.ApprovalGate = "" }, InvApprovalVersion},
		{"cancelled by nobody", Cancelled, func(t *Task) { t.CancelledBy = "" }, InvCancelledBy},
		{"attempt is not version", Running, func(t *Task) { t.Attempt = 3 }, InvAttemptIsVersion},
	} {
		task := validTask(tc.state)
		tc.corrupt(&task)
		got := CheckTask(task)
		require.Len(t, got, 1, "%s: %v", tc.name, got)
		require.Equal(t, tc.want, got[0].Invariant, tc.name)
		require.Equal(t, "t_1", got[0].TaskID)
		require.Contains(t, got[0].Error(), tc.want)
	}
}

func TestCheckChange(t *testing.T) {
	done := validTask(Completed)
	changed := done
	changed.UpdatedAt = testEpoch
	v := CheckChange(done, changed)
	require.Len(t, v, 1)
	require.Equal(t, InvTerminalFrozen, v[0].Invariant)
	require.Contains(t, v[0].Detail, "UpdatedAt")
	require.Empty(t, CheckChange(done, done))

	queued := validTask(Queued)
	require.Equal(t, InvTransition, CheckChange(queued, validTask(Completed))[0].Invariant)
	require.Empty(t, CheckChange(queued, validTask(Running)))
	backwards := validTask(Running)
	backwards.CostUsed = 3
	require.Equal(t, InvMonotonic, CheckChange(validTask(Running), backwards)[0].Invariant)
	older := validTask(Running)
	older.Version = 1
	require.Equal(t, InvMonotonic, CheckChange(validTask(Running), older)[0].Invariant)
}

func TestHistoryRefusesOlderFenceAfterNewer(t *testing.T) {
	h := NewHistory()
	at := func(s int) time.Time { return testEpoch.Add(time.Duration(s) * time.Second) }
	require.Nil(t, h.Accept(AcceptedWrite{TaskID: "t", Fence: 1, Kind: "claim", At: at(0)}))
	require.Nil(t, h.Accept(AcceptedWrite{TaskID: "t", Fence: 1, Kind: "step", At: at(1)}))
	require.Nil(t, h.Accept(AcceptedWrite{TaskID: "other", Fence: 1, Kind: "claim", At: at(1)}), "other tasks are separate")
	require.Nil(t, h.Accept(AcceptedWrite{TaskID: "t", Fence: 2, Kind: "claim", At: at(5)}))
	require.Nil(t, h.Accept(AcceptedWrite{TaskID: "t", Fence: 2, Kind: "step", At: at(6)}))

	v := h.Accept(AcceptedWrite{TaskID: "t", Fence: 1, Kind: "complete", At: at(7)})
	require.NotNil(t, v)
	require.Equal(t, InvSingleClaim, v.Invariant)
	require.Equal(t, "t", v.TaskID)
	require.Contains(t, v.Detail, "complete under fence 1")

	// The refused write changed nothing: claim 2's last write is still at
	// 6 s, so claim 3 may not begin before it, and may at it.
	v = h.Accept(AcceptedWrite{TaskID: "t", Fence: 3, Kind: "claim", At: at(5)})
	require.NotNil(t, v)
	require.Equal(t, InvSingleClaim, v.Invariant)
	require.Contains(t, v.Detail, "claim 3 began")
	require.Contains(t, v.Detail, "before claim 2's last write")
	require.Nil(t, h.Accept(AcceptedWrite{TaskID: "t", Fence: 3, Kind: "claim", At: at(6)}))
}

func TestHistoryRefusesAnotherOwnersWrite(t *testing.T) {
	h := NewHistory()
	require.Nil(t, h.Accept(AcceptedWrite{TaskID: "t", Fence: 1, Kind: "claim", At: testEpoch, Owner: "w1"}))
	require.Nil(t, h.Accept(AcceptedWrite{TaskID: "t", Fence: 1, Kind: "step", At: testEpoch, Owner: "w1"}))
	require.Nil(t, h.Accept(AcceptedWrite{TaskID: "t", Fence: 1, Kind: "step", At: testEpoch}), "an unknown owner is not judged")
	v := h.Accept(AcceptedWrite{TaskID: "t", Fence: 1, Kind: "complete", At: testEpoch, Owner: "w2"})
	require.Equal(t, &Violation{Invariant: InvSingleClaim, TaskID: "t",
		Detail: "complete under fence 1 accepted from w2, but w1 holds that claim"}, v)
}

func TestHistoryRefusesWriteAfterLease(t *testing.T) {
	h := NewHistory()
	lease := testEpoch.Add(30 * time.Second)
	require.Nil(t, h.Accept(AcceptedWrite{TaskID: "t", Fence: 1, Kind: "claim", At: testEpoch, Owner: "w1", LeaseUntil: lease}))
	require.Nil(t, h.Accept(AcceptedWrite{TaskID: "t", Fence: 1, Kind: "step", At: lease.Add(-time.Millisecond), Owner: "w1"}))
	v := h.Accept(AcceptedWrite{TaskID: "t", Fence: 1, Kind: "complete", At: lease, Owner: "w1"})
	require.NotNil(t, v, "a write at the end of the lease is too late")
	require.Equal(t, InvSingleClaim, v.Invariant)
	require.Equal(t, "t", v.TaskID)
	require.Equal(t, fmt.Sprintf("complete under fence 1 accepted at %v, after its lease ran out at %v", lease, lease), v.Detail)
	got, ok := h.LeaseUntil("t", 1)
	require.True(t, ok)
	require.Equal(t, lease, got)
}

func TestHistoryMayExtend(t *testing.T) {
	h := NewHistory()
	lease := testEpoch.Add(30 * time.Second)
	extended := lease.Add(30 * time.Second)
	require.Nil(t, h.Accept(AcceptedWrite{TaskID: "t", Fence: 1, Kind: "claim", At: testEpoch, Owner: "w1", LeaseUntil: lease}))
	h.MayExtend("t", 1, extended)
	h.MayExtend("t", 1, lease.Add(time.Second)) // an earlier maybe does not shorten it
	h.MayExtend("t", 2, extended)               // no such claim: ignored
	h.MayExtend("u", 1, extended)

	require.Nil(t, h.Accept(AcceptedWrite{TaskID: "t", Fence: 1, Kind: "step", At: lease.Add(10 * time.Second), Owner: "w1"}),
		"a heartbeat that may have been applied lets the claim write past its sure lease")
	got, ok := h.LeaseUntil("t", 1)
	require.True(t, ok)
	require.Equal(t, lease, got, "the sure lease is unchanged: the reaper may not count on the maybe")
	_, ok = h.LeaseUntil("t", 2)
	require.False(t, ok, "MayExtend made no claim")

	v := h.Accept(AcceptedWrite{TaskID: "t", Fence: 1, Kind: "complete", At: extended, Owner: "w1"})
	require.NotNil(t, v)
	require.Equal(t, InvSingleClaim, v.Invariant)
	require.Equal(t, fmt.Sprintf("complete under fence 1 accepted at %v, after its lease ran out at %v", extended, extended), v.Detail)

	// Without the maybe, the same write is refused at the sure lease.
	plain := NewHistory()
	require.Nil(t, plain.Accept(AcceptedWrite{TaskID: "t", Fence: 1, Kind: "claim", At: testEpoch, Owner: "w1", LeaseUntil: lease}))
	require.NotNil(t, plain.Accept(AcceptedWrite{TaskID: "t", Fence: 1, Kind: "step", At: lease.Add(10 * time.Second), Owner: "w1"}))
}

func TestHistoryRefusesOverlappingClaims(t *testing.T) {
	h := NewHistory()
	require.Nil(t, h.Accept(AcceptedWrite{TaskID: "t", Fence: 1, Kind: "step", At: testEpoch.Add(10 * time.Second)}))
	v := h.Accept(AcceptedWrite{TaskID: "t", Fence: 2, Kind: "claim", At: testEpoch.Add(9 * time.Second)})
	require.NotNil(t, v)
	require.Equal(t, InvSingleClaim, v.Invariant)
	require.Nil(t, h.Accept(AcceptedWrite{TaskID: "t", Fence: 2, Kind: "claim", At: testEpoch.Add(10 * time.Second)}))
}

func TestCheckEvents(t *testing.T) {
	ok := []Event{
		{TaskID: "t", Kind: EventStep, Detail: DetailStep(0, 1)},
		{TaskID: "t", Kind: EventStep, Detail: DetailStep(1, 1)},
		{TaskID: "u", Kind: EventStep, Detail: DetailStep(0, 1)},
		{TaskID: "t", Kind: EventEffectReceipt, OpID: "t.s0"},
		{TaskID: "t", Kind: EventStaleWrite, Detail: "step: fence 1 is not current (version 2)"},
	}
	require.Empty(t, CheckEvents(ok))
	twice := append(append([]Event(nil), ok...), Event{TaskID: "t", Kind: EventStep, Detail: DetailStep(1, 3)})
	v := CheckEvents(twice)
	require.Len(t, v, 1)
	require.Equal(t, InvStepOnce, v[0].Invariant)
	receipts := append(append([]Event(nil), ok...), Event{TaskID: "t", Kind: EventEffectReceipt, OpID: "t.s0"})
	v = CheckEvents(receipts)
	require.Len(t, v, 1)
	require.Equal(t, InvReceiptOnce, v[0].Invariant)
}

func TestCheckScheduleRunsAndUserLimits(t *testing.T) {
	tasks := []Task{
		{ID: "a", ScheduleID: "s", ScheduleRun: 0},
		{ID: "b", ScheduleID: "s", ScheduleRun: 1},
		{ID: "c"}, {ID: "d"},
	}
	require.Empty(t, CheckScheduleRuns(tasks))
	tasks = append(tasks, Task{ID: "e", ScheduleID: "s", ScheduleRun: 1})
	v := CheckScheduleRuns(tasks)
	require.Len(t, v, 1)
	require.Equal(t, InvScheduleRunOnce, v[0].Invariant)

	running := []Task{{User: "ana", State: Running}, {User: "ana", State: Running}, {User: "bob", State: Running}, {User: "bob", State: Queued}}
	limits := DefaultLimits
	require.Empty(t, CheckUserLimits(running, limits, nil), "0 is unlimited")
	limits.UserRunningMax = 1
	require.Len(t, CheckUserLimits(running, limits, nil), 1)
	require.Empty(t, CheckUserLimits(running, limits, []UserLimit{{User: "ana", RunningMax: 2, DepthMax: Inherit}}))
	require.Len(t, CheckUserLimits(running, DefaultLimits, []UserLimit{{User: "bob", RunningMax: 0, DepthMax: Inherit}, {User: "ana", RunningMax: 1, DepthMax: Inherit}}), 1)
}

func TestScheduleDueRun(t *testing.T) {
	s := Schedule{ScheduleSpec: ScheduleSpec{Origin: testEpoch, Period: time.Minute}, LastRun: -1}
	require.Equal(t, int64(-1), s.DueRun(testEpoch.Add(-time.Millisecond)))
	require.Equal(t, int64(0), s.DueRun(testEpoch))
	require.Equal(t, int64(0), s.DueRun(testEpoch.Add(time.Minute-time.Millisecond)))
	require.Equal(t, int64(1), s.DueRun(testEpoch.Add(time.Minute)))
	require.Equal(t, int64(60*24), s.DueRun(testEpoch.Add(24*time.Hour)))
	require.Equal(t, "schedule/s_1/7", RunKey("s_1", 7))
}

func TestSeededIDs(t *testing.T) {
	a, b := NewSeededIDs(42), NewSeededIDs(42)
	seen := map[string]bool{}
	for range 1000 {
		id := a.NewID(TaskIDPrefix)
		require.Equal(t, id, b.NewID(TaskIDPrefix), "same seed, same IDs")
		require.Len(t, id, len(TaskIDPrefix)+16)
		require.False(t, seen[id])
		seen[id] = true
	}
	require.NotEqual(t, NewSeededIDs(1).NewID("t_"), NewSeededIDs(2).NewID("t_"))
	require.Equal(t, "t_1.s3", OperationID("t_1", 3))
	require.Equal(t, "t_1.a2", Claim{TaskID: "t_1", Attempt: 2}.AttemptID())
}

func TestHistogram(t *testing.T) {
	h := NewHistogram()
	h.Observe(-time.Second)
	h.Observe(10 * time.Millisecond)
	h.Observe(11 * time.Millisecond)
	h.Observe(time.Hour)
	require.Equal(t, int64(4), h.Count)
	require.Equal(t, int64(10+11+3_600_000), h.SumMs)
	require.Equal(t, int64(2), h.Counts[0], "0 and 10 ms")
	require.Equal(t, int64(1), h.Counts[1])
	require.Equal(t, int64(1), h.Counts[len(HistogramBounds)])
	require.Equal(t, len(HistogramBounds), BucketOf(math.MaxInt64))
}

func TestCheckStepIndex(t *testing.T) {
	for _, step := range []int{0, 1, StepsMaxLimit - 1} {
		require.NoError(t, CheckStepIndex(step), "step %d", step)
		require.NoError(t, StepWrite{Index: step}.Validate(), "index %d", step)
	}
	for _, step := range []int{-1, StepsMaxLimit, StepsMaxLimit + 1} {
		var ve *ValidationError
		require.ErrorAs(t, CheckStepIndex(step), &ve, "step %d", step)
		require.Equal(t, "step", ve.Field)
		require.ErrorAs(t, StepWrite{Index: step}.Validate(), &ve, "index %d", step)
		require.Equal(t, "index", ve.Field, "a step write names its own field")
	}
}

func TestLimitsValidate(t *testing.T) {
	require.NoError(t, DefaultLimits.Validate())
	for _, tc := range []struct {
		field  string
		change func(*Limits)
	}{
		{"depth_max", func(l *Limits) { l.DepthMax = -1 }},
		{"attempts_max", func(l *Limits) { l.AttemptsMax = 0 }},
		{"claim_batch_max", func(l *Limits) { l.ClaimBatchMax = ClaimBatchLimit + 1 }},
		{"claim_batch_max", func(l *Limits) { l.ClaimBatchMax = 0 }},
		{"grant_cost_max", func(l *Limits) { l.GrantCostMax = CostBudgetMax + 1 }},
		{"grant_steps_max", func(l *Limits) { l.GrantStepsMax = -1 }},
	} {
		l := DefaultLimits
		tc.change(&l)
		var ve *ValidationError
		require.ErrorAs(t, l.Validate(), &ve)
		require.Equal(t, tc.field, ve.Field)
	}
	require.NoError(t, CheckGrant(Grant{Cost: DefaultLimits.GrantCostMax, Steps: DefaultLimits.GrantStepsMax}, DefaultLimits))
	require.Error(t, CheckGrant(Grant{Cost: DefaultLimits.GrantCostMax + 1}, DefaultLimits))
}

// Derived IDs and draws depend on the seed and the key only, never on how
// many were asked for before.
func TestDerivedIDsAndDraws(t *testing.T) {
	a, b := NewDerivedIDs(7), NewDerivedIDs(7)
	b.NewID(TaskIDPrefix)
	b.KeyedID(TaskIDPrefix, TaskKey("u", "other"))
	require.Equal(t, a.KeyedID(TaskIDPrefix, TaskKey("u", "k")), b.KeyedID(TaskIDPrefix, TaskKey("u", "k")))
	require.NotEqual(t, a.KeyedID(TaskIDPrefix, TaskKey("u", "k")), NewDerivedIDs(8).KeyedID(TaskIDPrefix, TaskKey("u", "k")))
	spec := ScheduleSpec{User: "u", Payload: "{}", CostBudget: 1, StepsMax: 1, Period: time.Minute}
	require.NotEqual(t, a.KeyedID(ScheduleIDPrefix, ScheduleKey(spec)), a.KeyedID(ScheduleIDPrefix, ScheduleKey(spec)),
		"identical schedule specs get distinct IDs")
	r, s := NewDerivedRand(7), NewDerivedRand(7)
	s.Uint64()
	require.Equal(t, DrawFor(r, JitterKey("t_1", 2)), DrawFor(s, JitterKey("t_1", 2)))
	require.NotEqual(t, DrawFor(r, JitterKey("t_1", 2)), DrawFor(r, JitterKey("t_1", 3)))
	require.Equal(t, "t_x", NewIDFor(fixedIDs{}, TaskIDPrefix, "ignored"), "a source without keys is asked for a fresh ID")
}

// With a clock, a task key's ID depends on the millisecond it is drawn
// at too: two parties on one clock agree, and a key drawn again at a
// later instant (a task made after the first one's tombstone expired)
// gets another ID. Schedule IDs do not read the clock.
func TestDerivedIDsAtAnInstant(t *testing.T) {
	at := time.UnixMilli(1_000)
	now := func() time.Time { return at }
	a, b := NewDerivedIDsAt(7, now), NewDerivedIDsAt(7, now)
	key := TaskKey("u", "k")
	first := a.KeyedID(TaskIDPrefix, key)
	require.Equal(t, first, b.KeyedID(TaskIDPrefix, key))
	require.NoError(t, CheckNewTaskID(first))
	at = at.Add(999 * time.Microsecond)
	require.Equal(t, first, a.KeyedID(TaskIDPrefix, key), "the same millisecond")
	at = at.Add(time.Millisecond)
	require.NotEqual(t, first, a.KeyedID(TaskIDPrefix, key), "a later instant")
	spec := ScheduleSpec{User: "u", Payload: "{}", CostBudget: 1, StepsMax: 1, Period: time.Minute}
	require.Equal(t, NewDerivedIDs(7).KeyedID(ScheduleIDPrefix, ScheduleKey(spec)), b.KeyedID(ScheduleIDPrefix, ScheduleKey(spec)))
}

type fixedIDs struct{}

func (fixedIDs) NewID(prefix string) string { return prefix + "x" }

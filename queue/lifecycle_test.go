package queue

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

func TestHeartbeatExtendsLease(t *testing.T) {
	b := setup(t)
	id, c := b.running()
	b.advance(testLease - time.Millisecond)
	hb, err := b.q.Heartbeat(b.ctx, c, time.Minute)
	require.NoError(t, err)
	require.Equal(t, model.HeartbeatResult{LeaseUntil: b.now().Add(time.Minute)}, hb)
	task := b.task(id)
	require.Equal(t, b.now().Add(time.Minute), task.LeaseUntil)
	require.Equal(t, b.now(), task.HeartbeatAt)
	// The old lease has passed; the extended one holds.
	b.advance(time.Second)
	require.Equal(t, model.ReapResult{}, b.reap())
	_, err = b.q.CompleteStep(b.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 1})
	require.NoError(t, err)

	_, err = b.q.Heartbeat(b.ctx, c, model.LeaseMin-time.Millisecond)
	requireField(t, err, "lease")
	_, err = b.q.Heartbeat(b.ctx, c, model.LeaseMax+time.Millisecond)
	requireField(t, err, "lease")
	// lease_until is stored in milliseconds: a finer lease would be
	// reported to the worker later than the queue enforces it.
	before := b.task(id)
	_, err = b.q.Heartbeat(b.ctx, c, time.Second+500*time.Microsecond)
	requireField(t, err, "lease")
	_, err = b.q.Claim(b.ctx, model.ClaimRequest{Worker: "w2", Max: 1, Lease: time.Second + 500*time.Microsecond})
	requireField(t, err, "lease")
	require.Equal(t, before, b.task(id))
}

func TestComplete(t *testing.T) {
	b := setup(t)
	id, c := b.running()
	_, err := b.q.CompleteStep(b.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 4})
	require.NoError(t, err)
	require.NoError(t, b.q.Complete(b.ctx, c))
	task := b.task(id)
	require.Equal(t, model.Completed, task.State)
	require.Equal(t, model.NoReason, task.Reason)
	require.Equal(t, int64(4), task.CostUsed)
	require.Equal(t, 1, task.StepsUsed)
	require.Empty(t, task.Owner)
	ev := b.lastEvent(id)
	require.Equal(t, model.EventCompleted, ev.Kind)
	require.Equal(t, "w1", ev.Actor)
	require.Equal(t, int64(1), ev.Fence)
}

// TestBackoffBoundsAndCap pins the jitter draw to its extremes: the delay
// is half the capped delay for a draw of 0 and all of it for the largest
// effective draw.
func TestBackoffBoundsAndCap(t *testing.T) {
	policy := model.Backoff{Base: time.Second, Max: 1500 * time.Millisecond}
	for _, tc := range []struct {
		charged int
		draw    uint64
		want    time.Duration
	}{
		{1, 0, 500 * time.Millisecond},
		{1, 500, time.Second},
		{2, 0, 750 * time.Millisecond},    // 2 s capped to 1.5 s
		{2, 750, 1500 * time.Millisecond}, // never above the cap
		{3, 750, 1500 * time.Millisecond},
	} {
		t.Run(fmt.Sprintf("charged%d/draw%d", tc.charged, tc.draw), func(t *testing.T) {
			b := setup(t, withRand(fixedRand(tc.draw)), withBackoff(policy))
			b.setLimits(func(l *model.Limits) { l.AttemptsMax = 10 })
			id := b.submit()
			var delay time.Duration
			for i := 1; i <= tc.charged; i++ {
				b.advance(b.task(id).RunAt.Sub(b.now()))
				c := b.claim("w1")
				_, err := b.q.Fail(b.ctx, c.Claim, model.Failure{Class: model.Transient})
				require.NoError(t, err)
				delay = b.task(id).RunAt.Sub(b.now())
			}
			require.Equal(t, tc.charged, b.task(id).AttemptsCharged)
			require.Equal(t, tc.want, delay)
		})
	}
}

func TestFailUncertainParks(t *testing.T) {
	b := setup(t)
	id, c := b.running()
	intent, err := b.q.RecordIntent(b.ctx, c, 0)
	require.NoError(t, err)
	to, err := b.q.Fail(b.ctx, c, model.Failure{Class: model.Uncertain, OpID: intent.OpID, Message: "lost response"})
	require.NoError(t, err)
	require.Equal(t, model.NeedsReview, to)
	task := b.task(id)
	require.Equal(t, model.UncertainEffect, task.Reason)
	require.Equal(t, 0, task.AttemptsCharged)
	require.Equal(t, "lost response", task.LastError)
	ev := b.lastEvent(id)
	require.Equal(t, model.EventUncertain, ev.Kind)
	require.Equal(t, intent.OpID, ev.Detail)
	b.advance(time.Hour)
	b.noClaim()
}

func TestReapIsBatched(t *testing.T) {
	b := setup(t)
	total := model.ReapBatchMax + 1
	for range total {
		b.submit()
	}
	for claimed := 0; claimed < total; {
		claimed += len(b.claimN("w1", 16))
	}
	b.advance(testLease)
	require.Equal(t, model.ReapResult{Expired: model.ReapBatchMax, More: true}, b.reap())
	require.Equal(t, model.ReapResult{Expired: 1}, b.reap())
	require.Equal(t, model.ReapResult{}, b.reap())
	m := b.metrics()
	require.Equal(t, int64(total), m.LeaseExpiries)
	require.Equal(t, int64(total), m.Depth[model.Queued])
}

func TestSettleEffectApplied(t *testing.T) {
	b := setup(t)
	id, _ := b.parked()
	op := model.OperationID(id, 0)
	b.advance(time.Minute)
	require.NoError(t, b.q.SettleEffect(b.ctx, op, true, "ops"))
	effects := b.effects(id)
	require.Len(t, effects, 1)
	require.Equal(t, model.Effect{OpID: op, TaskID: id, Step: 0, IntentFence: 1, IntentAt: epoch,
		ReceiptAt: b.now(), ReceiptBy: "ops", Result: "settled by operator"}, effects[0])
	ev := b.lastEvent(id)
	require.Equal(t, model.EventEffectSettled, ev.Kind)
	require.Equal(t, model.DetailEffectSettled(op, true), ev.Detail)
	require.Equal(t, model.NeedsReview, b.state(id), "settling does not move the task")
	require.ErrorIs(t, b.q.SettleEffect(b.ctx, op, false, "ops"), ErrEffectReceipted)

	// Requeued, the step finds its receipt and never calls again.
	require.NoError(t, b.q.Requeue(b.ctx, id, model.Grant{}, "ops"))
	c := b.claim("w2")
	res, err := b.q.RecordIntent(b.ctx, c.Claim, 0)
	require.NoError(t, err)
	require.Equal(t, model.IntentResult{OpID: op, Status: model.IntentReceipted, Result: "settled by operator"}, res)
}

func TestSettleEffectNotApplied(t *testing.T) {
	b := setup(t)
	id, _ := b.parked()
	op := model.OperationID(id, 0)
	require.NoError(t, b.q.SettleEffect(b.ctx, op, false, "ops"))
	require.Empty(t, b.effects(id))
	require.Equal(t, model.DetailEffectSettled(op, false), b.lastEvent(id).Detail)
	require.ErrorIs(t, b.q.SettleEffect(b.ctx, op, false, "ops"), ErrNotFound)

	// Requeued, the step makes the effect afresh under its new claim.
	require.NoError(t, b.q.Requeue(b.ctx, id, model.Grant{}, "ops"))
	c := b.claim("w2")
	res, err := b.q.RecordIntent(b.ctx, c.Claim, 0)
	require.NoError(t, err)
	require.Equal(t, model.IntentResult{OpID: op, Status: model.IntentRecorded}, res)
	require.Equal(t, int64(2), b.effects(id)[0].IntentFence)
}

func TestSettleEffectRefusals(t *testing.T) {
	b := setup(t)
	id, c := b.running()
	intent, err := b.q.RecordIntent(b.ctx, c, 0)
	require.NoError(t, err)
	dump := b.dump()
	require.ErrorIs(t, b.q.SettleEffect(b.ctx, intent.OpID, true, "ops"), ErrInvalidTransition, "task is running")
	require.ErrorIs(t, b.q.SettleEffect(b.ctx, model.OperationID(id, 5), true, "ops"), ErrNotFound)
	requireField(t, b.q.SettleEffect(b.ctx, intent.OpID, true, ""), "actor")
	require.Equal(t, dump, b.dump())
}

// fencedWrites are every worker write that names a claim.
var fencedWrites = []struct {
	name string
	call func(b *bundle, c model.Claim) error
}{
	{"heartbeat", func(b *bundle, c model.Claim) error {
		_, err := b.q.Heartbeat(b.ctx, c, testLease)
		return err
	}},
	{"step", func(b *bundle, c model.Claim) error {
		_, err := b.q.CompleteStep(b.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 1})
		return err
	}},
	{"effect_intent", func(b *bundle, c model.Claim) error {
		_, err := b.q.RecordIntent(b.ctx, c, 0)
		return err
	}},
	{"effect_receipt", func(b *bundle, c model.Claim) error {
		return b.q.RecordReceipt(b.ctx, c, model.OperationID(c.TaskID, 0), "ok")
	}},
	{"pause", func(b *bundle, c model.Claim) error {
		_, err := b.q.Pause(b.ctx, c, 0, "manager")
		return err
	}},
	{"complete", func(b *bundle, c model.Claim) error { return b.q.Complete(b.ctx, c) }},
	{"fail", func(b *bundle, c model.Claim) error {
		_, err := b.q.Fail(b.ctx, c, model.Failure{Class: model.Transient})
		return err
	}},
	{"release", func(b *bundle, c model.Claim) error {
		_, err := b.q.Release(b.ctx, c)
		return err
	}},
	{"cancel_ack", func(b *bundle, c model.Claim) error { return b.q.AcknowledgeCancel(b.ctx, c) }},
}

// staleClaims each leave a task whose claim by w1 (which recorded an intent
// for step 0) may no longer write: a newer claim holds the task, the lease
// has expired, or the task is no longer running. Where the task is still
// active its cancellation is requested, so cancel_ack would otherwise have
// something to acknowledge.
var staleClaims = []struct {
	name    string
	prepare func(b *bundle) model.Claim
}{
	{"stale fence", func(b *bundle) model.Claim {
		id, c := startStale(b, false)
		b.advance(testLease)
		require.Equal(b.t, 1, b.reap().Expired)
		b.advance(time.Hour)
		newer := b.claim("w2")
		require.Equal(b.t, id, newer.Claim.TaskID)
		require.Equal(b.t, int64(2), newer.Claim.Fence)
		_, err := b.q.Cancel(b.ctx, id, "caller")
		require.NoError(b.t, err)
		return c
	}},
	{"lease expired", func(b *bundle) model.Claim {
		_, c := startStale(b, true)
		b.advance(testLease)
		return c
	}},
	{"released", func(b *bundle) model.Claim {
		id, c := startStale(b, false)
		_, err := b.q.Release(b.ctx, c)
		require.NoError(b.t, err)
		require.Equal(b.t, model.Queued, b.state(id))
		require.Equal(b.t, c.Fence, b.task(id).Version, "the fence is current; the state is not")
		return c
	}},
	{"paused", func(b *bundle) model.Claim {
		id, c := startStale(b, false)
		_, err := b.q.Pause(b.ctx, c, 0, "manager")
		require.NoError(b.t, err)
		require.Equal(b.t, model.WaitingForApproval, b.state(id))
		return c
	}},
	{"completed", func(b *bundle) model.Claim {
		_, c := startStale(b, true)
		require.NoError(b.t, b.q.Complete(b.ctx, c))
		return c
	}},
}

func startStale(b *bundle, cancel bool) (string, model.Claim) {
	id, c := b.running()
	_, err := b.q.RecordIntent(b.ctx, c, 0)
	require.NoError(b.t, err)
	if cancel {
		_, err = b.q.Cancel(b.ctx, id, "caller")
		require.NoError(b.t, err)
	}
	return id, c
}

// TestStaleWritesChangeNothing sends every fenced write under a claim that
// is no longer valid: each is refused with ErrStaleClaim, leaves the task
// and the effects ledger exactly as they were, and appends exactly one
// stale_write event naming the stale claim's attempt and fence.
func TestStaleWritesChangeNothing(t *testing.T) {
	for _, sc := range staleClaims {
		for _, w := range fencedWrites {
			t.Run(sc.name+"/"+w.name, func(t *testing.T) {
				b := setup(t)
				c := sc.prepare(b)
				before, effects, events := b.task(c.TaskID), b.effects(c.TaskID), b.events("")
				err := w.call(b, c)
				require.ErrorIs(t, err, ErrStaleClaim)
				require.Equal(t, before, b.task(c.TaskID))
				require.Equal(t, effects, b.effects(c.TaskID))
				after := b.events("")
				require.Len(t, after, len(events)+1)
				require.Equal(t, events, after[:len(events)])
				ev := after[len(events)]
				require.Equal(t, model.EventStaleWrite, ev.Kind)
				require.Equal(t, c.TaskID, ev.TaskID)
				require.Equal(t, c.Attempt, ev.Attempt)
				require.Equal(t, c.Fence, ev.Fence)
				require.Equal(t, c.Owner, ev.Actor)
				require.Equal(t, before.State, ev.From)
				require.Equal(t, before.State, ev.To)
				require.True(t, strings.HasPrefix(ev.Detail, w.name+": "), "detail %q", ev.Detail)
				require.Equal(t, int64(1), b.metrics().StaleWrites)
			})
		}
	}
}

func TestUnknownTaskWriteIsNotFound(t *testing.T) {
	b := setup(t)
	c := model.Claim{TaskID: "t_missing", Fence: 1, Owner: "w1", Attempt: 1}
	for _, w := range fencedWrites {
		require.ErrorIs(t, w.call(b, c), ErrNotFound, w.name)
	}
	require.Empty(t, b.events(""))
}

func TestStepSpendingWholeBudgetIsAccepted(t *testing.T) {
	b := setup(t)
	id, c := b.running()
	_, err := b.q.CompleteStep(b.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 10})
	require.NoError(t, err)
	_, err = b.q.CompleteStep(b.ctx, model.StepWrite{Claim: c, Index: 1, Cost: 0})
	require.NoError(t, err)
	task := b.task(id)
	require.Equal(t, model.Running, task.State)
	require.Equal(t, int64(10), task.CostUsed)
}

func TestEffectIntentWithoutReceiptIsUncertain(t *testing.T) {
	b := setup(t)
	id, c := b.running()
	res, err := b.q.RecordIntent(b.ctx, c, 0)
	require.NoError(t, err)
	_, err = b.q.Release(b.ctx, c)
	require.NoError(t, err)
	again := b.claim("w2")
	dump := b.dump()
	res2, err := b.q.RecordIntent(b.ctx, again.Claim, 0)
	require.NoError(t, err)
	require.Equal(t, model.IntentResult{OpID: res.OpID, Status: model.IntentUncertain}, res2)
	require.Equal(t, dump, b.dump(), "an uncertain intent records nothing new")
	require.Equal(t, int64(1), b.effects(id)[0].IntentFence)

	// Reconciled with the service, the new claim records the receipt.
	require.NoError(t, b.q.RecordReceipt(b.ctx, again.Claim, res.OpID, "found applied"))
	e := b.effects(id)[0]
	require.Equal(t, int64(2), e.ReceiptFence)
	require.Equal(t, "found applied", e.Result)
}

func TestEffectSecondReceipt(t *testing.T) {
	b := setup(t)
	id, c := b.running()
	res, err := b.q.RecordIntent(b.ctx, c, 0)
	require.NoError(t, err)
	require.NoError(t, b.q.RecordReceipt(b.ctx, c, res.OpID, "ok"))
	dump := b.dump()
	require.NoError(t, b.q.RecordReceipt(b.ctx, c, res.OpID, "ok"), "the same receipt again is a retry")
	require.Equal(t, dump, b.dump())
	require.ErrorIs(t, b.q.RecordReceipt(b.ctx, c, res.OpID, "different"), ErrEffectReceipted)
	require.Equal(t, dump, b.dump())
	require.Empty(t, model.CheckEvents(b.events(id)))

	require.ErrorIs(t, b.q.RecordReceipt(b.ctx, c, model.OperationID(id, 1), "ok"), ErrNotFound, "no intent")
	other, _ := b.running(func(r *model.SubmitRequest) { r.User = "bob" })
	require.ErrorIs(t, b.q.RecordReceipt(b.ctx, c, model.OperationID(other, 0), "ok"), ErrNotFound)
	_, err = b.q.RecordIntent(b.ctx, c, model.StepsMaxLimit)
	requireField(t, err, "step")
	requireField(t, b.q.RecordReceipt(b.ctx, c, res.OpID, strings.Repeat("x", model.ResultMax+1)), "result")
}

func TestClaimOrder(t *testing.T) {
	b := setup(t)
	at := func(d time.Duration, priority int) func(*model.SubmitRequest) {
		return func(r *model.SubmitRequest) { r.RunAt, r.Priority = epoch.Add(d), priority }
	}
	low := b.submit(at(-time.Minute, -5))
	mid := b.submit(at(0, 0))
	var ties []string
	for range 6 {
		ties = append(ties, b.submit(at(-time.Second, 5)))
	}
	early := b.submit(at(-2*time.Second, 5))
	top := b.submit(at(0, 9))
	// The tie group's IDs do not sort in submission order, so an order by
	// ID would fail this test.
	require.False(t, sort.StringsAreSorted(ties), "precondition: pick another seed")

	want := append(append([]string{top, early}, ties...), mid, low)
	var got []string
	for _, c := range b.claimN("w1", 3) {
		got = append(got, c.Claim.TaskID)
	}
	for len(got) < len(want) {
		got = append(got, b.claim("w1").Claim.TaskID)
	}
	require.Equal(t, want, got)
	b.noClaim()
}

func TestClaimBatchBounded(t *testing.T) {
	b := setup(t)
	limits, _, err := b.q.Limits(b.ctx)
	require.NoError(t, err)
	for range limits.ClaimBatchMax + 2 {
		b.submit()
	}
	dump := b.dump()
	_, err = b.q.Claim(b.ctx, model.ClaimRequest{Worker: "w1", Max: limits.ClaimBatchMax + 1, Lease: testLease})
	requireField(t, err, "max")
	_, err = b.q.Claim(b.ctx, model.ClaimRequest{Worker: "w1", Max: 0, Lease: testLease})
	requireField(t, err, "max")
	_, err = b.q.Claim(b.ctx, model.ClaimRequest{Worker: "w1", Max: 1, Lease: model.LeaseMax + time.Millisecond})
	requireField(t, err, "lease")
	_, err = b.q.Claim(b.ctx, model.ClaimRequest{Worker: "w 1", Max: 1, Lease: testLease})
	requireField(t, err, "worker")
	require.Equal(t, dump, b.dump())
	require.Len(t, b.claimN("w1", limits.ClaimBatchMax), limits.ClaimBatchMax)

	b.setLimits(func(l *model.Limits) { l.ClaimBatchMax = 1 })
	_, err = b.q.Claim(b.ctx, model.ClaimRequest{Worker: "w1", Max: 2, Lease: testLease})
	requireField(t, err, "max")
	require.Len(t, b.claimN("w1", 1), 1)
}

// TestRegressionLoweredLimitBlocksWithoutEvicting: lowering a user's limit
// below its running count evicts nothing, and no task of that user is
// claimed until its running count is below the new limit. The rapid test's
// first failure was a lowered limit.
func TestRegressionLoweredLimitBlocksWithoutEvicting(t *testing.T) {
	b := setup(t)
	var ids []string
	for range 4 {
		ids = append(ids, b.submit())
	}
	cs := b.claimN("w1", 3)
	require.Len(t, cs, 3)
	runningBefore := []model.Task{b.task(ids[0]), b.task(ids[1]), b.task(ids[2])}

	require.NoError(t, b.q.SetUserLimit(b.ctx, model.UserLimit{User: "ana", RunningMax: 1, DepthMax: model.Inherit}, "ops"))
	for i, before := range runningBefore {
		require.Equal(t, before, b.task(ids[i]), "running tasks are not evicted")
	}
	for _, c := range cs {
		_, err := b.q.Heartbeat(b.ctx, c.Claim, testLease)
		require.NoError(t, err, "running claims stay valid")
	}
	b.noClaim()
	require.NoError(t, b.q.Complete(b.ctx, cs[0].Claim))
	b.noClaim() // two running, limit one
	require.NoError(t, b.q.Complete(b.ctx, cs[1].Claim))
	b.noClaim() // one running, limit one
	require.NoError(t, b.q.CheckCounters(b.ctx))
	require.NoError(t, b.q.Complete(b.ctx, cs[2].Claim))
	require.Equal(t, ids[3], b.claim("w1").Claim.TaskID)

	// The same through the default limit.
	d := setup(t)
	for range 3 {
		d.submit()
	}
	require.Len(t, d.claimN("w1", 2), 2)
	d.setLimits(func(l *model.Limits) { l.UserRunningMax = 1 })
	require.Len(t, d.events(""), 3+2+1)
	running, err := d.q.List(d.ctx, model.ListFilter{State: model.Running})
	require.NoError(t, err)
	require.Len(t, running, 2)
	d.noClaim()
	_, users, err := d.q.Limits(d.ctx)
	require.NoError(t, err)
	limits, _, err := d.q.Limits(d.ctx)
	require.NoError(t, err)
	require.Len(t, model.CheckUserLimits(running, limits, users), 1, "over the lowered limit until tasks settle")

	// Raising it again unblocks at once.
	d.setLimits(func(l *model.Limits) { l.UserRunningMax = 0 })
	require.Len(t, d.claimN("w1", 1), 1)
}

func TestAdmissionDepthCaps(t *testing.T) {
	t.Run("overall", func(t *testing.T) {
		b := setup(t)
		b.setLimits(func(l *model.Limits) { l.DepthMax = 2 })
		_, c := b.running(func(r *model.SubmitRequest) { r.User = "bob" })
		b.submit()
		dump := b.dump()
		_, err := b.q.Submit(b.ctx, b.request())
		require.ErrorIs(t, err, ErrQueueFull)
		carl := b.request()
		carl.User = "carl"
		_, err = b.q.Submit(b.ctx, carl)
		require.ErrorIs(t, err, ErrQueueFull)
		require.Equal(t, dump, b.dump(), "nothing refused is half-written")
		// A settled task frees its place.
		require.NoError(t, b.q.Complete(b.ctx, c))
		b.submit()
	})
	t.Run("per user", func(t *testing.T) {
		b := setup(t)
		require.NoError(t, b.q.SetUserLimit(b.ctx, model.UserLimit{User: "ana", RunningMax: model.Inherit, DepthMax: 1}, "ops"))
		b.submit()
		dump := b.dump()
		_, err := b.q.Submit(b.ctx, b.request())
		require.ErrorIs(t, err, ErrQueueFull)
		require.Equal(t, dump, b.dump())
		b.submit(func(r *model.SubmitRequest) { r.User = "bob" })
	})
	t.Run("default per user", func(t *testing.T) {
		b := setup(t)
		b.setLimits(func(l *model.Limits) { l.UserDepthMax = 2 })
		id, _ := b.parked() // needs_review is not active
		b.submit()
		b.submit()
		dump := b.dump()
		_, err := b.q.Submit(b.ctx, b.request())
		require.ErrorIs(t, err, ErrQueueFull)
		require.Equal(t, dump, b.dump())
		require.NoError(t, b.q.Requeue(b.ctx, id, model.Grant{}, "ops"))
		require.Equal(t, model.Queued, b.state(id), "requeue is not admission")
		b.submit(func(r *model.SubmitRequest) { r.User = "bob" })
	})
}

func scheduleSpec(origin time.Time, period time.Duration) model.ScheduleSpec {
	return model.ScheduleSpec{User: "ana", Payload: `{"steps":[]}`, CostBudget: 5, StepsMax: 2, Origin: origin, Period: period}
}

func (b *bundle) enqueueDue() model.EnqueueResult {
	b.t.Helper()
	res, err := b.q.EnqueueDue(b.ctx)
	require.NoError(b.t, err)
	return res
}

func (b *bundle) scheduleRuns(id string) []int64 {
	b.t.Helper()
	tasks, err := b.q.List(b.ctx, model.ListFilter{Limit: model.ListLimitMax})
	require.NoError(b.t, err)
	var runs []int64
	for _, task := range tasks {
		if task.ScheduleID == id {
			runs = append(runs, task.ScheduleRun)
			require.Equal(b.t, model.RunKey(id, task.ScheduleRun), task.Key)
		}
	}
	require.Empty(b.t, model.CheckScheduleRuns(tasks))
	return runs
}

func TestScheduleRunsAreAnchored(t *testing.T) {
	b := setup(t)
	origin, period := epoch.Add(time.Minute), 10*time.Minute
	s, err := b.q.AddSchedule(b.ctx, scheduleSpec(origin, period), "ops")
	require.NoError(t, err)
	require.Equal(t, int64(-1), s.LastRun)
	b.advance(time.Minute - time.Millisecond)
	require.Equal(t, model.EnqueueResult{}, b.enqueueDue())
	b.advance(time.Millisecond)
	require.Equal(t, model.EnqueueResult{Enqueued: 1}, b.enqueueDue())
	require.Equal(t, model.EnqueueResult{}, b.enqueueDue(), "run 0 only once")
	require.Equal(t, []int64{0}, b.scheduleRuns(s.ID))

	// Run 0 finishes late; run 1 is still due at origin + period.
	c := b.claimFor("w1", 1, time.Hour)[0]
	require.Equal(t, origin, c.Task.RunAt)
	b.advance(7 * time.Minute)
	require.NoError(t, b.q.Complete(b.ctx, c.Claim))
	b.advance(3*time.Minute - time.Millisecond)
	require.Equal(t, model.EnqueueResult{}, b.enqueueDue())
	b.advance(time.Millisecond)
	require.Equal(t, model.EnqueueResult{Enqueued: 1}, b.enqueueDue())
	c = b.claim("w1")
	require.Equal(t, origin.Add(period), c.Task.RunAt)
	require.Equal(t, int64(1), c.Task.ScheduleRun)
	require.Equal(t, s.ID, c.Task.ScheduleID)
	require.Equal(t, "schedule:"+s.ID, b.events(c.Claim.TaskID)[0].Actor)
	require.Equal(t, []int64{0, 1}, b.scheduleRuns(s.ID))

	schedules, err := b.q.Schedules(b.ctx)
	require.NoError(t, err)
	require.Len(t, schedules, 1)
	require.Equal(t, int64(1), schedules[0].LastRun)
}

func TestScheduleMissedRunsCollapse(t *testing.T) {
	b := setup(t)
	period := time.Minute
	s, err := b.q.AddSchedule(b.ctx, scheduleSpec(epoch, period), "ops")
	require.NoError(t, err)
	require.Equal(t, model.EnqueueResult{Enqueued: 1}, b.enqueueDue())
	// Down for a little over five periods: runs 1 to 4 are skipped, run 5
	// is enqueued.
	b.advance(5*period + 30*time.Second)
	require.Equal(t, model.EnqueueResult{Enqueued: 1, Collapsed: 4}, b.enqueueDue())
	require.Equal(t, []int64{0, 5}, b.scheduleRuns(s.ID))
	tasks, err := b.q.List(b.ctx, model.ListFilter{State: model.Queued})
	require.NoError(t, err)
	require.Equal(t, epoch.Add(5*period), tasks[1].RunAt)
	require.Contains(t, b.events(tasks[1].ID)[0].Actor, s.ID)

	// A schedule whose first due run is late counts every run before it.
	s2, err := b.q.AddSchedule(b.ctx, scheduleSpec(epoch, 2*period), "ops")
	require.NoError(t, err)
	require.Equal(t, model.EnqueueResult{Enqueued: 1, Collapsed: 2}, b.enqueueDue())
	require.Equal(t, []int64{2}, b.scheduleRuns(s2.ID))
}

func TestScheduleRunEnqueuedOnceAcrossSchedulers(t *testing.T) {
	a := setupFile(t)
	s, err := a.q.AddSchedule(a.ctx, scheduleSpec(epoch, time.Minute), "ops")
	require.NoError(t, err)
	other := a.reopen(2)
	a.advance(3 * time.Minute)

	// Two schedulers pass at the same moment, concurrently.
	var wg sync.WaitGroup
	results := make([]model.EnqueueResult, 2)
	errs := make([]error, 2)
	start := make(chan struct{})
	for i, q := range []*Queue{a.q, other.q} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = q.EnqueueDue(a.ctx)
		}()
	}
	close(start)
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	require.Equal(t, 1, results[0].Enqueued+results[1].Enqueued)
	require.Equal(t, []int64{3}, a.scheduleRuns(s.ID))

	// A restart: the same file opened afresh enqueues nothing new.
	other.close()
	a.close()
	restarted := a.reopen(3)
	require.Equal(t, model.EnqueueResult{}, restarted.enqueueDue())
	restarted.advance(time.Minute)
	require.Equal(t, model.EnqueueResult{Enqueued: 1}, restarted.enqueueDue())
	require.Equal(t, []int64{3, 4}, restarted.scheduleRuns(s.ID))
}

// TestScheduleRunKeysAreReserved: a caller may not submit under a run's
// key. If one could, that run would conflict on every pass and the
// scheduler would stop enqueueing any schedule's runs.
func TestScheduleRunKeysAreReserved(t *testing.T) {
	b := setup(t)
	s, err := b.q.AddSchedule(b.ctx, scheduleSpec(epoch, time.Minute), "ops")
	require.NoError(t, err)
	other := scheduleSpec(epoch, time.Minute)
	other.User = "bob"
	s2, err := b.q.AddSchedule(b.ctx, other, "ops")
	require.NoError(t, err)
	dump := b.dump()
	r := b.request()
	r.Key = model.RunKey(s.ID, 0)
	_, err = b.q.Submit(b.ctx, r)
	requireField(t, err, "key")
	require.Equal(t, dump, b.dump())
	require.Equal(t, model.EnqueueResult{Enqueued: 2}, b.enqueueDue())
	require.Equal(t, []int64{0}, b.scheduleRuns(s.ID))
	require.Equal(t, []int64{0}, b.scheduleRuns(s2.ID))
}

func TestScheduleValidation(t *testing.T) {
	b := setup(t)
	for _, tc := range []struct {
		field  string
		change func(*model.ScheduleSpec)
	}{
		{"period", func(s *model.ScheduleSpec) { s.Period = model.PeriodMin - time.Millisecond }},
		{"period", func(s *model.ScheduleSpec) { s.Period = model.PeriodMax + time.Millisecond }},
		{"period", func(s *model.ScheduleSpec) { s.Period = time.Second + time.Microsecond }},
		{"origin", func(s *model.ScheduleSpec) { s.Origin = time.Time{} }},
		{"payload", func(s *model.ScheduleSpec) { s.Payload = "[]" }},
		{"user", func(s *model.ScheduleSpec) { s.User = "a b" }},
		{"cost_budget", func(s *model.ScheduleSpec) { s.CostBudget = 0 }},
	} {
		spec := scheduleSpec(epoch, time.Minute)
		tc.change(&spec)
		_, err := b.q.AddSchedule(b.ctx, spec, "ops")
		requireField(t, err, tc.field)
	}
	schedules, err := b.q.Schedules(b.ctx)
	require.NoError(t, err)
	require.Empty(t, schedules)
	require.Empty(t, b.events(""))

	s, err := b.q.AddSchedule(b.ctx, scheduleSpec(epoch, time.Minute), "ops")
	require.NoError(t, err)
	require.NoError(t, b.q.RemoveSchedule(b.ctx, s.ID, "ops"))
	require.ErrorIs(t, b.q.RemoveSchedule(b.ctx, s.ID, "ops"), ErrNotFound)
	b.advance(time.Hour)
	require.Equal(t, model.EnqueueResult{}, b.enqueueDue())
}

func TestScheduleRefusedRunRetriedNextPass(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetUserLimit(b.ctx, model.UserLimit{User: "ana", RunningMax: model.Inherit, DepthMax: 1}, "ops"))
	blocker := b.submit()
	s, err := b.q.AddSchedule(b.ctx, scheduleSpec(epoch, time.Minute), "ops")
	require.NoError(t, err)
	dump := b.dump()
	require.Equal(t, model.EnqueueResult{Refused: 1}, b.enqueueDue())
	require.Equal(t, dump, b.dump(), "a refused run writes nothing")
	require.Empty(t, b.scheduleRuns(s.ID))
	_, err = b.q.Cancel(b.ctx, blocker, "caller")
	require.NoError(t, err)
	require.Equal(t, model.EnqueueResult{Enqueued: 1}, b.enqueueDue())
	require.Equal(t, []int64{0}, b.scheduleRuns(s.ID))
}

func TestMetricsReconcileAndDurations(t *testing.T) {
	b := setup(t)
	a := b.submit()
	b.submit()
	b.submit(func(r *model.SubmitRequest) { r.RunAt = epoch.Add(time.Minute) })
	m := b.metrics()
	require.True(t, m.Reconciles())
	require.Equal(t, int64(3), m.Submitted)
	require.Equal(t, int64(3), m.Depth[model.Queued])

	b.advance(2 * time.Second)
	require.Equal(t, 2*time.Second, b.metrics().OldestQueuedAge)
	ca := b.claim("w1")
	require.Equal(t, a, ca.Claim.TaskID)
	b.advance(3 * time.Second)
	require.NoError(t, b.q.Complete(b.ctx, ca.Claim))

	// The delayed task waits from its run_at, not from its submission.
	b.advance(time.Minute - 5*time.Second + 250*time.Millisecond)
	cs := b.claimFor("w1", 2, time.Hour)
	require.Len(t, cs, 2)
	b.advance(40 * time.Second)
	_, err := b.q.Fail(b.ctx, cs[0].Claim, model.Failure{Class: model.Permanent})
	require.NoError(t, err)

	m = b.metrics()
	require.True(t, m.Reconciles())
	require.Equal(t, map[model.State]int64{model.Queued: 0, model.Running: 1, model.WaitingForApproval: 0,
		model.NeedsReview: 0, model.Completed: 1, model.Failed: 1, model.Cancelled: 0}, m.Depth)
	require.Equal(t, int64(1), m.Completions)
	require.Equal(t, int64(1), m.Failures)

	waits := []int64{2000, 60_250, 250} // a; the second task (queued at epoch); the delayed task
	require.Equal(t, histogramOf(waits...), m.QueueWait)
	runs := []int64{3000, 40_000}
	require.Equal(t, histogramOf(runs...), m.RunTime)
	require.NoError(t, b.q.CheckCounters(b.ctx))
}

func histogramOf(ms ...int64) model.Histogram {
	h := model.NewHistogram()
	for _, v := range ms {
		h.Observe(time.Duration(v) * time.Millisecond)
	}
	return h
}

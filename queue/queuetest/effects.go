package queuetest

import (
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

func testEffectsLedger(s *suite) {
	t := s.t
	id, c := s.running()
	op := model.OperationID(id, 0)
	intent, err := s.store.RecordIntent(s.ctx, c, 0)
	require.NoError(t, err)
	require.Equal(t, model.IntentResult{OpID: op, Status: model.IntentRecorded}, intent)
	recorded := s.lastEvent(id)
	require.Equal(t, model.EventEffectIntent, recorded.Kind)
	require.Equal(t, op, recorded.OpID)
	events := len(s.events(id))
	again, err := s.store.RecordIntent(s.ctx, c, 0)
	require.NoError(t, err)
	require.Equal(t, intent, again, "a repeated intent under the same claim is still recorded")
	require.Len(t, s.events(id), events, "and records nothing new")
	effects := s.effects(id)
	require.Len(t, effects, 1)
	require.Equal(t, model.Effect{OpID: op, TaskID: id, Step: 0, IntentFence: c.Fence, IntentAt: s.now()}, effects[0])
	require.False(t, effects[0].Receipted())

	require.ErrorIs(t, s.store.RecordReceipt(s.ctx, c, model.OperationID(id, 3), "ok"), model.ErrNotFound,
		"no receipt without an intent")
	s.advance(time.Second)
	require.NoError(t, s.store.RecordReceipt(s.ctx, c, op, "charged 5"))
	require.NoError(t, s.store.RecordReceipt(s.ctx, c, op, "charged 5"), "the same receipt again is accepted")
	require.ErrorIs(t, s.store.RecordReceipt(s.ctx, c, op, "charged 6"), model.ErrEffectReceipted)
	effects = s.effects(id)
	require.Len(t, effects, 1)
	require.Equal(t, c.Fence, effects[0].ReceiptFence)
	require.Equal(t, s.now(), effects[0].ReceiptAt)
	require.Equal(t, "charged 5", effects[0].Result)

	receipts := 0
	for _, e := range s.events(id) {
		if e.Kind == model.EventEffectReceipt {
			receipts++
			require.Equal(t, op, e.OpID)
		}
	}
	require.Equal(t, 1, receipts)

	// A later claim of the task finds the receipt: the operation is never
	// called again.
	_, err = s.store.Release(s.ctx, c)
	require.NoError(t, err)
	next := s.claim("w2").Claim
	receipted, err := s.store.RecordIntent(s.ctx, next, 0)
	require.NoError(t, err)
	require.Equal(t, model.IntentResult{OpID: op, Status: model.IntentReceipted, Result: "charged 5"}, receipted)
	require.ErrorIs(t, s.store.RecordReceipt(s.ctx, next, op, "charged 5"), model.ErrEffectReceipted,
		"a receipt under another claim is a second one")
	require.Equal(t, effects, s.effects(id))
}

func testEffectUncertain(s *suite) {
	t := s.t
	id, c := s.running()
	op := model.OperationID(id, 0)
	_, err := s.store.RecordIntent(s.ctx, c, 0)
	require.NoError(t, err)
	// The worker dies between intent and receipt; its lease runs out.
	s.advance(lease)
	_, err = s.store.Reap(s.ctx)
	require.NoError(t, err)
	s.advance(s.backoff.Max)
	next := s.claim("w2").Claim
	uncertain, err := s.store.RecordIntent(s.ctx, next, 0)
	require.NoError(t, err)
	require.Equal(t, model.IntentResult{OpID: op, Status: model.IntentUncertain}, uncertain,
		"an intent without a receipt from an earlier claim is uncertain")
	require.Equal(t, c.Fence, s.effects(id)[0].IntentFence, "the earlier intent is kept")
	require.ErrorIs(t, s.store.RecordReceipt(s.ctx, c, op, "late"), model.ErrStaleClaim,
		"the old claim cannot record the receipt")

	// The service cannot say: the task goes to review.
	to, err := s.store.Fail(s.ctx, next, model.Failure{Class: model.Uncertain, OpID: op, Message: "no answer"})
	require.NoError(t, err)
	require.Equal(t, model.NeedsReview, to)
	task := s.task(id)
	require.Equal(t, model.UncertainEffect, task.Reason)
	require.Equal(t, "no answer", task.LastError)
	e := s.lastEvent(id)
	require.Equal(t, model.EventUncertain, e.Kind)
	require.Equal(t, op, e.Detail)

	// An operator who finds it was not applied removes the intent, and the
	// step makes the effect afresh after a requeue.
	require.NoError(t, s.store.SettleEffect(s.ctx, op, false, "ops"))
	require.Empty(t, s.effects(id))
	require.ErrorIs(t, s.store.SettleEffect(s.ctx, op, true, "ops"), model.ErrNotFound)
	require.NoError(t, s.store.Requeue(s.ctx, id, model.Grant{}, "ops"))
	third := s.claim("w3").Claim
	fresh, err := s.store.RecordIntent(s.ctx, third, 0)
	require.NoError(t, err)
	require.Equal(t, model.IntentRecorded, fresh.Status)
	require.Equal(t, third.Fence, s.effects(id)[0].IntentFence)
}

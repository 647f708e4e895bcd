package queue

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

func seqs(events []model.Event) []int64 {
	out := []int64{}
	for _, e := range events {
		out = append(out, e.Seq)
	}
	return out
}

func trailSeqs(events []TrailEvent) []int64 {
	out := []int64{}
	for _, e := range events {
		out = append(out, e.Seq)
	}
	return out
}

func TestEventsSinceResumesWithoutGapOrRepeat(t *testing.T) {
	b := setup(t)
	a := b.submit()
	bob := b.submit(func(r *model.SubmitRequest) { r.User = "bob" })
	_, err := b.q.Cancel(b.ctx, a, "ops")
	require.NoError(t, err)
	all, err := b.q.Events(b.ctx, "")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(all), 3)

	var got []int64
	var after int64
	for {
		events, err := b.q.EventsSince(b.ctx, EventFilter{After: after, Limit: 1})
		require.NoError(t, err)
		if len(events) == 0 {
			break
		}
		got = append(got, trailSeqs(events)...)
		after = events[len(events)-1].Seq
	}
	require.Equal(t, seqs(all), got)

	mine, err := b.q.EventsSince(b.ctx, EventFilter{Users: []string{"bob"}})
	require.NoError(t, err)
	require.NotEmpty(t, mine)
	for _, e := range mine {
		require.Equal(t, bob, e.TaskID, "an event of another user's task")
		require.Equal(t, "bob", e.User)
	}
	none, err := b.q.EventsSince(b.ctx, EventFilter{Users: []string{}})
	require.NoError(t, err)
	require.Empty(t, none)

	one, err := b.q.EventsSince(b.ctx, EventFilter{TaskID: a, After: b.events(a)[0].Seq})
	require.NoError(t, err)
	require.Equal(t, seqs(b.events(a)[1:]), trailSeqs(one))
	require.Equal(t, "ana", one[0].User)

	last, err := b.q.LastEventSeq(b.ctx, a)
	require.NoError(t, err)
	require.Equal(t, b.lastEvent(a).Seq, last)
	last, err = b.q.LastEventSeq(b.ctx, "t-none")
	require.NoError(t, err)
	require.Zero(t, last)
}

// TestSubmitActorFromContext: a submit through a context naming an actor
// records that actor; the actor is not part of the request's hash, so the
// same request through another actor is a replay.
func TestSubmitActorFromContext(t *testing.T) {
	b := setup(t)
	req := b.request()
	res, err := b.q.Submit(model.WithActor(b.ctx, "alice-laptop"), req)
	require.NoError(t, err)
	require.Equal(t, "alice-laptop", b.events(res.TaskID)[0].Actor)
	again, err := b.q.Submit(model.WithActor(b.ctx, "alice-ci"), req)
	require.NoError(t, err)
	require.True(t, again.Replay)
	require.Equal(t, res.TaskID, again.TaskID)

	many, err := b.q.SubmitMany(model.WithActor(b.ctx, "alice-ci"), []model.SubmitRequest{b.request()})
	require.NoError(t, err)
	require.Equal(t, "alice-ci", b.events(many[0].TaskID)[0].Actor)
	plain := b.submit()
	require.Equal(t, "ana", b.events(plain)[0].Actor, "without an actor the user is the actor")
}

// TestWaitEventsWokenByWrite: a waiter with nothing to read is woken by a
// write of the same process, without the clock moving.
func TestWaitEventsWokenByWrite(t *testing.T) {
	b := setup(t)
	id := b.submit()
	last := b.lastEvent(id).Seq
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second) // a safety net, not a synchronisation
	defer cancel()
	got := make(chan []TrailEvent, 1)
	errs := make(chan error, 1)
	go func() {
		events, err := b.q.WaitEvents(ctx, EventFilter{TaskID: id, After: last})
		got <- events
		errs <- err
	}()
	require.NoError(t, b.clock.BlockUntilContext(ctx, 1)) // the waiter's poll timer
	_, err := b.q.Cancel(b.ctx, id, "ops")
	require.NoError(t, err)
	require.NoError(t, <-errs)
	events := <-got
	require.Len(t, events, 1)
	require.Equal(t, model.Cancelled, events[0].To)
}

// TestWaitEventsPollsForAnotherProcess: a write by another queue on the
// same file is seen at the next poll of the queue's clock.
func TestWaitEventsPollsForAnotherProcess(t *testing.T) {
	b := setupFile(t)
	other := b.reopen(2)
	id := b.submit()
	last := b.lastEvent(id).Seq
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	got := make(chan []TrailEvent, 1)
	go func() {
		events, err := b.q.WaitEvents(ctx, EventFilter{TaskID: id, After: last})
		if err != nil {
			events = nil
		}
		got <- events
	}()
	require.NoError(t, b.clock.BlockUntilContext(ctx, 1))
	_, err := other.q.Cancel(other.ctx, id, "ops")
	require.NoError(t, err)
	select {
	case <-got:
		t.Fatal("woken before the poll: the other process's write cannot signal this one")
	default:
	}
	b.clock.Advance(WaitPollInterval)
	events := <-got
	require.Len(t, events, 1)
	require.Equal(t, model.Cancelled, events[0].To)
}

func TestWaitEventsEndsWithContext(t *testing.T) {
	b := setup(t)
	id := b.submit()
	last := b.lastEvent(id).Seq
	ctx, cancel := context.WithCancel(b.ctx)
	errs := make(chan error, 1)
	go func() {
		_, err := b.q.WaitEvents(ctx, EventFilter{TaskID: id, After: last})
		errs <- err
	}()
	require.NoError(t, b.clock.BlockUntilContext(b.ctx, 1))
	cancel()
	require.ErrorIs(t, <-errs, context.Canceled)
}

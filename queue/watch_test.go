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
		got = append(got, seqs(events)...)
		after = events[len(events)-1].Seq
	}
	require.Equal(t, seqs(all), got)

	mine, err := b.q.EventsSince(b.ctx, EventFilter{Users: []string{"bob"}})
	require.NoError(t, err)
	require.NotEmpty(t, mine)
	for _, e := range mine {
		require.Equal(t, bob, e.TaskID, "an event of another user's task")
	}
	none, err := b.q.EventsSince(b.ctx, EventFilter{Users: []string{}})
	require.NoError(t, err)
	require.Empty(t, none)

	one, err := b.q.EventsSince(b.ctx, EventFilter{TaskID: a, After: b.events(a)[0].Seq})
	require.NoError(t, err)
	require.Equal(t, seqs(b.events(a)[1:]), seqs(one))
}

// TestWaitEventsWokenByWrite: a waiter with nothing to read is woken by a
// write of the same process, without the clock moving.
func TestWaitEventsWokenByWrite(t *testing.T) {
	b := setup(t)
	id := b.submit()
	last := b.lastEvent(id).Seq
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second) // a safety net, not a synchronisation
	defer cancel()
	got := make(chan []model.Event, 1)
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
	got := make(chan []model.Event, 1)
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

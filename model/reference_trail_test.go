package model

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestReferenceEventsThroughWindow: a read for some users looks at most
// its window past the cursor and says so, so that a follower of a quiet
// user passes the others' events window by window, and gets each of its
// user's events once, in order; a bad limit or cursor is refused.
func TestReferenceEventsThroughWindow(t *testing.T) {
	ctx := context.Background()
	clock := &stepClock{at: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)}
	r := NewReference(ReferenceOptions{Clock: clock, IDs: NewSeededIDs(1), Rand: rand.New(rand.NewPCG(1, 2))})
	submit := func(user, key string) string {
		res, err := r.Submit(ctx, SubmitRequest{User: user, Key: key, Payload: `{}`, CostBudget: 1, StepsMax: 1})
		require.NoError(t, err)
		return res.TaskID
	}
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		submit("busy", k)
	}
	quiet := submit("quiet", "q") // event 6
	for _, k := range []string{"f", "g"} {
		submit("busy", k)
	}

	events, through, err := r.EventsThrough(ctx, []string{"quiet"}, 0, 10, 4)
	require.NoError(t, err)
	require.Empty(t, events)
	require.EqualValues(t, 4, through, "one window, and no further")
	events, through, err = r.EventsThrough(ctx, []string{"quiet"}, through, 10, 4)
	require.NoError(t, err)
	require.Len(t, events, 1)
	require.Equal(t, quiet, events[0].TaskID)
	require.EqualValues(t, 8, through, "the end of the trail")
	events, through, err = r.EventsThrough(ctx, []string{"quiet"}, through, 10, 4)
	require.NoError(t, err)
	require.Empty(t, events)
	require.EqualValues(t, 8, through, "nothing past the end")

	events, through, err = r.EventsThrough(ctx, []string{"busy"}, 0, 2, 100)
	require.NoError(t, err)
	require.Len(t, events, 2)
	require.Equal(t, events[1].Seq, through, "a full page looked as far as its last event")

	_, _, err = r.EventsThrough(ctx, []string{"busy"}, 0, 0, 4)
	require.ErrorIs(t, err, ErrInvalidInput)
	_, _, err = r.EventsThrough(ctx, []string{"busy"}, -1, 1, 4)
	require.ErrorIs(t, err, ErrInvalidInput)
}

// TestReferenceEventsSincePrune: EventsSince returns what was appended
// after a number, whatever a prune removed before it.
func TestReferenceEventsSincePrune(t *testing.T) {
	ctx := context.Background()
	clock := &stepClock{at: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)}
	r := NewReference(ReferenceOptions{Clock: clock, IDs: NewSeededIDs(1), Rand: rand.New(rand.NewPCG(1, 2))})
	settle(t, r, "k1", false)
	settle(t, r, "k2", false)
	clock.at = clock.at.Add(time.Hour)
	seen := r.LastEventSeq()
	_, err := r.Prune(ctx, PruneSpec{OlderThan: time.Minute, KeepKeys: time.Hour, Batch: 10, Actor: "ops"})
	require.NoError(t, err)
	since := r.EventsSince(seen)
	require.Len(t, since, 1)
	require.Equal(t, EventPruned, since[0].Kind)
	require.Equal(t, seen+1, since[0].Seq)
	require.Equal(t, since[0].Seq, r.LastEventSeq())
	require.Nil(t, r.EventsSince(r.LastEventSeq()))
}

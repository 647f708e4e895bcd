package queuetest

import (
	"context"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// queueFollower is the queue's read of the trail for some users.
type queueFollower interface {
	EventsThrough(ctx context.Context, f queue.EventFilter) ([]queue.TrailEvent, int64, error)
}

// refFollower is the reference model's.
type refFollower interface {
	EventsThrough(ctx context.Context, users []string, after int64, limit, window int) ([]model.Event, int64, error)
}

// eventsThrough reads the store's trail for users after a cursor, or
// skips the test when the store has no such read.
func (s *suite) eventsThrough(users []string, after int64, limit int) ([]model.Event, int64) {
	s.t.Helper()
	switch f := s.store.(type) {
	case queueFollower:
		trail, through, err := f.EventsThrough(s.ctx, queue.EventFilter{Users: users, After: after, Limit: limit})
		require.NoError(s.t, err)
		out := make([]model.Event, len(trail))
		for i, e := range trail {
			out[i] = e.Event
		}
		return out, through
	case refFollower:
		out, through, err := f.EventsThrough(s.ctx, users, after, limit, queue.EventsScanWindow)
		require.NoError(s.t, err)
		return out, through
	}
	s.t.Skipf("%T has no read of the trail for some users", s.store)
	return nil, 0
}

// testFollowUsers: a follower of some users reading the trail a page at a
// time gets each of their events exactly once, in order, and none of
// anyone else's; a page that is full says it looked as far as its last
// event, and a read past the end looks no further than the cursor.
func testFollowUsers(s *suite) {
	for i := range 4 {
		s.submit()
		s.submit(func(r *model.SubmitRequest) { r.User = "bob" })
		if i%2 == 0 {
			c := s.claim("w1")
			require.NoError(s.t, s.store.Complete(s.ctx, c.Claim))
		}
	}
	users := map[string]string{}
	var want []model.Event
	for _, e := range s.events("") {
		if e.TaskID == "" {
			continue
		}
		if _, ok := users[e.TaskID]; !ok {
			users[e.TaskID] = s.task(e.TaskID).User
		}
		if users[e.TaskID] == "ana" {
			want = append(want, e)
		}
	}
	require.NotEmpty(s.t, want)
	var got []model.Event
	var after int64
	for reads := 0; ; reads++ {
		require.Less(s.t, reads, 100, "the follower never reached the end")
		page, through := s.eventsThrough([]string{"ana"}, after, 2)
		require.GreaterOrEqual(s.t, through, after, "the read looked back")
		if len(page) == 2 {
			require.Equal(s.t, page[1].Seq, through, "a full page looked as far as its last event")
		}
		got = append(got, page...)
		if len(page) == 0 && through == after {
			break
		}
		after = through
	}
	require.Equal(s.t, want, got)
	none, through := s.eventsThrough([]string{}, after, 2)
	require.Empty(s.t, none)
	require.Equal(s.t, after, through)
}

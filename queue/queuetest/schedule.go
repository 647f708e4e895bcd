package queuetest

import (
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

func (s *suite) addSchedule(origin time.Time, period time.Duration) model.Schedule {
	s.t.Helper()
	sched, err := s.store.AddSchedule(s.ctx, model.ScheduleSpec{User: "ana", Payload: `{"report":"daily"}`,
		CostBudget: 5, StepsMax: 3, Origin: origin, Period: period}, "ops")
	require.NoError(s.t, err)
	require.EqualValues(s.t, -1, sched.LastRun)
	return sched
}

func (s *suite) enqueueDue() model.EnqueueResult {
	s.t.Helper()
	res, err := s.store.EnqueueDue(s.ctx)
	require.NoError(s.t, err)
	return res
}

// runs returns the tasks of a schedule in submission order.
func (s *suite) runs(id string) []model.Task {
	s.t.Helper()
	tasks, err := s.store.List(s.ctx, model.ListFilter{Limit: model.ListLimitMax})
	require.NoError(s.t, err)
	var out []model.Task
	for _, task := range tasks {
		if task.ScheduleID == id {
			out = append(out, task)
		}
	}
	return out
}

func testScheduleRunsOnce(s *suite) {
	t := s.t
	_, err := s.store.AddSchedule(s.ctx, model.ScheduleSpec{User: "ana", Payload: `{}`, CostBudget: 5, StepsMax: 3,
		Origin: s.now(), Period: model.PeriodMin - time.Millisecond}, "ops")
	s.requireInvalid(err, "period")

	origin := s.now().Add(time.Minute)
	sched := s.addSchedule(origin, time.Hour)
	require.Equal(t, model.EnqueueResult{}, s.enqueueDue(), "nothing is due before the origin")
	s.advance(time.Minute)
	require.Equal(t, model.EnqueueResult{Enqueued: 1}, s.enqueueDue(), "run 0 is due at the origin")
	require.Equal(t, model.EnqueueResult{}, s.enqueueDue(), "a run is enqueued at most once")
	s.advance(time.Hour - time.Millisecond)
	require.Equal(t, model.EnqueueResult{}, s.enqueueDue())
	s.advance(time.Millisecond)
	require.Equal(t, model.EnqueueResult{Enqueued: 1}, s.enqueueDue())
	require.Equal(t, model.EnqueueResult{}, s.enqueueDue())

	runs := s.runs(sched.ID)
	require.Len(t, runs, 2)
	for k, task := range runs {
		require.EqualValues(t, k, task.ScheduleRun)
		require.Equal(t, origin.Add(time.Duration(k)*time.Hour), task.RunAt, "run k is due at origin + k·period")
		require.Equal(t, model.RunKey(sched.ID, int64(k)), task.Key)
		require.Equal(t, `{"report":"daily"}`, task.Payload)
		require.Equal(t, "schedule:"+sched.ID, s.events(task.ID)[0].Actor)
	}
	schedules, err := s.store.Schedules(s.ctx)
	require.NoError(t, err)
	require.Len(t, schedules, 1)
	require.EqualValues(t, 1, schedules[0].LastRun)
}

func testScheduleCollapses(s *suite) {
	t := s.t
	origin := s.now()
	sched := s.addSchedule(origin, time.Minute)
	require.Equal(t, model.EnqueueResult{Enqueued: 1}, s.enqueueDue())
	// Downtime: runs 1 to 10 are missed; only the latest due, run 10, is
	// enqueued, and the nine before it are collapsed into it.
	s.advance(10*time.Minute + 30*time.Second)
	require.Equal(t, model.EnqueueResult{Enqueued: 1, Collapsed: 9}, s.enqueueDue())
	require.Equal(t, model.EnqueueResult{}, s.enqueueDue())
	runs := s.runs(sched.ID)
	require.Len(t, runs, 2)
	require.EqualValues(t, 10, runs[1].ScheduleRun)
	require.Equal(t, origin.Add(10*time.Minute), runs[1].RunAt, "anchored at the origin, not at the restart")
	s.advance(30 * time.Second)
	require.Equal(t, model.EnqueueResult{Enqueued: 1}, s.enqueueDue())
	require.EqualValues(t, 11, s.runs(sched.ID)[2].ScheduleRun)
}

func testScheduleRemove(s *suite) {
	t := s.t
	sched := s.addSchedule(s.now(), time.Minute)
	require.Equal(t, 1, s.enqueueDue().Enqueued)
	require.NoError(t, s.store.RemoveSchedule(s.ctx, sched.ID, "ops"))
	require.ErrorIs(t, s.store.RemoveSchedule(s.ctx, sched.ID, "ops"), model.ErrNotFound)
	s.advance(time.Hour)
	require.Equal(t, model.EnqueueResult{}, s.enqueueDue())
	require.Len(t, s.runs(sched.ID), 1, "runs already enqueued stay")
	schedules, err := s.store.Schedules(s.ctx)
	require.NoError(t, err)
	require.Empty(t, schedules)
}

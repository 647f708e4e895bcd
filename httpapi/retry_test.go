package httpapi

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/model"
)

// TestQueueFullSaysWhenToRetry: a submit a depth cap refuses is 429 with
// Retry-After (RetryAfter, in seconds), which the client's Error carries;
// a schedule the schedules' cap refuses names no time, as only removing
// one makes room.
func TestQueueFullSaysWhenToRetry(t *testing.T) {
	a := setupAPI(t)
	ctx := t.Context()
	limits := model.DefaultLimits
	limits.DepthMax = 1
	require.NoError(t, a.q.SetLimits(ctx, limits, "setup"))
	a.submit(t, "alice", "k1", nil)

	status, header, body := a.do(t, http.MethodPost, "/v1/tasks", secretSubmit, submitJSON(t, "alice", "k2", nil))
	require.Equal(t, http.StatusTooManyRequests, status, "%s", body)
	require.Equal(t, "5", header.Get("Retry-After"))
	require.Equal(t, 5*time.Second, RetryAfter)
	status, header, _ = a.do(t, http.MethodPost, "/v1/tasks/batch", secretSubmit, `{"tasks":[`+submitJSON(t, "alice", "k3", nil)+`]}`)
	require.Equal(t, http.StatusTooManyRequests, status)
	require.Equal(t, "5", header.Get("Retry-After"))

	_, err := a.clientFor(t, secretSubmit).Submit(ctx, model.SubmitRequest{User: "alice", Key: "k4", Payload: `{"steps":[]}`, CostBudget: 1, StepsMax: 1})
	requireRefusal(t, err, client.ErrQueueFull, "")
	var e *client.Error
	require.True(t, errors.As(err, &e))
	require.Equal(t, RetryAfter, e.RetryAfter)
	require.Contains(t, e.Error(), "retry after 5s")

	for i := range model.SchedulesMax {
		_, err := a.q.AddSchedule(ctx, model.ScheduleSpec{User: "alice", Payload: `{"steps":[]}`, CostBudget: 1, StepsMax: 1,
			Origin: apiEpoch.Add(time.Duration(i+1) * time.Hour), Period: time.Hour}, "setup")
		require.NoError(t, err)
	}
	status, header, body = a.do(t, http.MethodPost, "/v1/schedules", secretOperate,
		`{"user":"alice","payload":{"steps":[]},"cost_budget":1,"steps_max":1,"origin":"2026-03-02T09:00:00Z","period_ms":3600000}`)
	require.Equal(t, http.StatusTooManyRequests, status, "%s", body)
	require.Empty(t, header.Get("Retry-After"))
}

package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/wire"
)

// uuidIDs hands out UUID-shaped IDs, as a program mounting the API with
// its own IDSource might; while bad is set, IDs that break the rule.
type uuidIDs struct {
	mu  sync.Mutex
	n   int
	bad bool
}

func (u *uuidIDs) NewID(prefix string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.n++
	if u.bad {
		return fmt.Sprintf("%stask %d", prefix, u.n)
	}
	return fmt.Sprintf("%s550e8400-e29b-41d4-a716-%012x", prefix, u.n)
}

// TestTaskIDsOfAnyIDSourceAreNamedByTheAPI: the routes take the task IDs
// the queue stores (model.TaskIDRule): a UUID-shaped ID from the
// program's own source is read, waited on, listed and cancelled; the
// document's pattern for a task ID is the model's; an ID source that
// breaks the rule is the server's fault (500 internal, nothing written,
// its message only in the log).
func TestTaskIDsOfAnyIDSourceAreNamedByTheAPI(t *testing.T) {
	ids := &uuidIDs{}
	a := setupAPI(t, func(o *queue.Options) { o.IDs = ids })
	id := a.submit(t, "alice", "k1", nil)
	require.Regexp(t, `^t_550e8400-e29b-41d4-a716-[0-9a-f]{12}$`, id)
	got := a.call(t, http.MethodGet, "/v1/tasks/"+id, secretSubmit, "", http.StatusOK)
	require.Equal(t, id, got["id"])
	status, _, body := a.do(t, http.MethodGet, "/v1/tasks/"+id+"/events", secretSubmit, "")
	require.Equal(t, http.StatusOK, status, "%s", body)
	require.Contains(t, string(body), `"task_id":"`+id+`"`)
	got = a.call(t, http.MethodPost, "/v1/tasks/"+id+"/cancel", secretSubmit, "", http.StatusOK)
	require.Equal(t, "cancelled", got["state"])
	refused := a.call(t, http.MethodGet, "/v1/tasks/t_a.b", secretSubmit, "", http.StatusBadRequest)
	require.Equal(t, "id", refused["field"])
	require.Contains(t, refused["error"], model.TaskIDRule)

	doc, _, err := loadDocument()
	require.NoError(t, err)
	n := 0
	for path, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			for _, p := range append(item.Parameters, op.Parameters...) {
				if p.Value.In == "path" && p.Value.Name == "id" && path != "/v1/schedules/{id}" {
					require.Equal(t, model.TaskIDPattern, p.Value.Schema.Value.Pattern, "%s", path)
					n++
				}
			}
		}
	}
	require.Positive(t, n)

	ids.mu.Lock()
	ids.bad = true
	ids.mu.Unlock()
	status, _, body = a.do(t, http.MethodPost, "/v1/tasks", secretSubmit, submitJSON(t, "alice", "k2", nil))
	require.Equal(t, http.StatusInternalServerError, status, "%s", body)
	var e wire.Error
	require.NoError(t, json.Unmarshal(body, &e))
	require.Equal(t, "internal", e.Code)
	require.NotContains(t, e.Error, "task 2", "the bad ID is in the log, not the answer")
	require.Contains(t, a.logs.String(), "not a task ID")
	m, err := a.q.Metrics(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 1, m.Submitted, "the refused submit wrote nothing")
}

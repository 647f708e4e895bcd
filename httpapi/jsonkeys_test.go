package httpapi

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRepeatedJSONKeysRefused: a request body with a key repeated in one
// object, at any depth, is refused with 400 naming the key's path (the
// message never quotes a value), and nothing is written. The body
// {"user":"alice",...,"user":"mallory"} used to submit as mallory.
func TestRepeatedJSONKeysRefused(t *testing.T) {
	a := setupAPI(t)
	submit := `{"user":"alice","key":"k1","payload":{"steps":[{"cost":1}]},"cost_budget":5,"steps_max":3,"user":"mallory"}`
	msg := a.refused(t, http.MethodPost, "/v1/tasks", secretRoot, submit, http.StatusBadRequest, "user")
	require.Equal(t, "user: appears twice in one object", msg)
	nested := `{"user":"alice","key":"k1","payload":{"steps":[{"cost":1,"effect":"secret-charge","cost":2}]},"cost_budget":5,"steps_max":3}`
	msg = a.refused(t, http.MethodPost, "/v1/tasks", secretRoot, nested, http.StatusBadRequest, "payload.steps[0].cost")
	require.NotContains(t, msg, "secret-charge")
	batch := `{"tasks":[{"user":"alice","key":"b1","payload":{"steps":[]},"cost_budget":5,"steps_max":3},` +
		`{"user":"alice","key":"b2","key":"b3","payload":{"steps":[]},"cost_budget":5,"steps_max":3}]}`
	a.refused(t, http.MethodPost, "/v1/tasks/batch", secretRoot, batch, http.StatusBadRequest, "tasks[1].key")
	before := a.call(t, http.MethodGet, "/v1/limits", secretOperate, "", http.StatusOK)
	a.refused(t, http.MethodPut, "/v1/limits/users/alice", secretOperate, `{"running_max":1,"running_max":5}`,
		http.StatusBadRequest, "running_max")
	require.Equal(t, before, a.call(t, http.MethodGet, "/v1/limits", secretOperate, "", http.StatusOK))
	tasks := a.call(t, http.MethodGet, "/v1/tasks", secretRoot, "", http.StatusOK)
	require.Empty(t, tasks["tasks"], "no task was stored")
}

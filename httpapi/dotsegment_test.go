package httpapi

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDotSegmentsRefused: a path with a segment "." or ".." (as written or
// percent-encoded) is refused with 400 naming the path, never redirected
// to another resource; PUT /v1/limits/users/.. used to answer 307 to
// /v1/limits. Nothing is written: the limits read afterwards are those
// before.
func TestDotSegmentsRefused(t *testing.T) {
	a := setupAPI(t)
	before := a.call(t, http.MethodGet, "/v1/limits", secretOperate, "", http.StatusOK)
	noRedirect := *a.client
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	a.client = &noRedirect
	for _, path := range []string{
		"/v1/limits/users/..", "/v1/limits/users/.", "/v1/limits/users/%2E%2E", "/v1/limits/users/%2e",
	} {
		msg := a.refused(t, http.MethodPut, path, secretOperate, `{"running_max":1}`, http.StatusBadRequest, "path")
		require.Contains(t, msg, ". or ..", path)
	}
	for _, path := range []string{"/v1/tasks/..", "/v1/tasks/%2E%2E/events"} {
		a.refused(t, http.MethodGet, path, secretRoot, "", http.StatusBadRequest, "path")
	}
	require.Equal(t, before, a.call(t, http.MethodGet, "/v1/limits", secretOperate, "", http.StatusOK))
	// A name holding dots is a name: its own limit is set.
	a.call(t, http.MethodPut, "/v1/limits/users/a..b", secretOperate, `{"running_max":1}`, http.StatusOK)
}

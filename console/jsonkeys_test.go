package console

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFormsRefuseRepeatedJSONKeys: a payload (submit and schedule forms)
// or a bulk line with a key repeated in one object is refused with 400
// naming the key's path, never its value, and nothing is written.
func TestFormsRefuseRepeatedJSONKeys(t *testing.T) {
	b := setup(t)
	c := b.client(t)
	c.signIn(operatorSecret)
	before := b.eventCount(t)
	payload := `{"steps": [{"cost": 1, "effect": "secret-charge", "cost": 5}]}`
	values := url.Values{"user": {"ana"}, "key": {"one"}, "payload": {payload}, "cost_budget": {"10"}, "steps_max": {"3"}, "priority": {"0"}}
	res := c.form("/ui/submit", "/ui/submit", values)
	require.Equal(t, http.StatusBadRequest, res.status, res.body)
	require.Contains(t, res.body, "key steps[0].cost appears twice in one object")

	res = c.form("/ui/submit", "/ui/submit/bulk", url.Values{"batch": {
		`{"user": "ana", "key": "b1", "payload": {"steps": [{"cost": 1}]}, "cost_budget": 10, "steps_max": 5, "user": "bob"}`}})
	require.Equal(t, http.StatusBadRequest, res.status, res.body)
	require.Contains(t, res.body, "line 1")
	require.Contains(t, res.body, "key user appears twice in one object")

	res = c.form("/ui/schedules", "/ui/schedules", url.Values{"user": {"ana"}, "payload": {payload}, "cost_budget": {"10"},
		"steps_max": {"5"}, "priority": {"0"}, "period": {"1h"}})
	require.Equal(t, http.StatusBadRequest, res.status, res.body)
	require.Contains(t, res.body, "key steps[0].cost appears twice in one object")
	require.Equal(t, before, b.eventCount(t), "nothing was written")
}

package kinds_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/kinds"
)

// The example kinds file loads, and its schemas take and refuse what its
// demos send.
func TestExampleKindsFile(t *testing.T) {
	f, err := kinds.Load("../examples/kinds/kinds.json")
	require.NoError(t, err)
	require.Equal(t, []string{"charge", "notify", "report"}, f.Names())
	for kind, services := range map[string]kinds.ServiceKind{"report": kinds.ServiceDedup, "charge": kinds.ServiceQueryable, "notify": kinds.ServiceNone} {
		k, _ := f.Kind(kind)
		require.Equal(t, services, k.Worker.Service, kind)
	}
	require.NoError(t, f.Validate("report", []byte(`{"customer": "acme", "month": "2026-11", "seconds": 8}`)))
	require.NoError(t, f.Validate("charge", []byte(`{"customer": "acme", "cents": 1250}`)))
	require.NoError(t, f.Validate("notify", []byte(`{"message": "hello", "fail_first": true}`)))

	field, _ := refused(t, f.Validate("report", []byte(`{"customer": "acme", "month": "2026-13"}`)))
	require.Equal(t, "month", field)
	field, _ = refused(t, f.Validate("charge", []byte(`{"customer": "acme", "cents": 0}`)))
	require.Equal(t, "cents", field)
}

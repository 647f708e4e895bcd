//go:build leasehold_broken

package queue

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBrokenQueriesReportErrors: a broken variant's query that clashes
// with a query already defined is an error, not silently dropped.
func TestBrokenQueriesReportErrors(t *testing.T) {
	texts := map[string]string{}
	require.NoError(t, brokenQueries(sqliteBackend{}.sqlFiles(), texts))
	require.Contains(t, texts, "claim_next_any_user")
	err := brokenQueries(sqliteBackend{}.sqlFiles(), map[string]string{"claim_next_any_user": "SELECT 1"})
	require.ErrorContains(t, err, "broken.sql")
	require.ErrorContains(t, err, "claim_next_any_user defined twice")
}

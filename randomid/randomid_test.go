package randomid_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/randomid"
)

// Task IDs from the source pass the model's task-ID rule, with 16 hex
// digits after the prefix, and a few thousand of them never repeat.
func TestTaskIDsPassTheModelsRule(t *testing.T) {
	seen := map[string]bool{}
	for range 5000 {
		id := randomid.Source{}.NewID(model.TaskIDPrefix)
		require.NoError(t, model.CheckTaskID(id))
		require.Len(t, strings.TrimPrefix(id, model.TaskIDPrefix), randomid.DigitsLen)
		require.False(t, seen[id], "%s drawn twice", id)
		seen[id] = true
	}
	require.True(t, strings.HasPrefix(randomid.Source{}.NewID(model.ScheduleIDPrefix), model.ScheduleIDPrefix))
}

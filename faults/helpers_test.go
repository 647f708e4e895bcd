package faults_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/faults"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// epoch is where every test's fake clock starts.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const testLease = 30 * time.Second

func request(key string) model.SubmitRequest {
	return model.SubmitRequest{User: "ana", Key: key, Payload: `{"steps":[{"cost":3},{"cost":2}]}`, CostBudget: 10, StepsMax: 3}
}

// countEvents counts taskID's events of kind.
func countEvents(t *testing.T, q *queue.Queue, taskID string, kind model.EventKind) int {
	t.Helper()
	evs, err := q.Events(context.Background(), taskID)
	require.NoError(t, err)
	n := 0
	for _, e := range evs {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// requireInjected checks that err is an injected error naming fault.
func requireInjected(t *testing.T, err error, fault string) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, faults.ErrInjected)
	var fe *faults.Error
	require.ErrorAs(t, err, &fe)
	require.Equal(t, fault, fe.Fault)
	require.Contains(t, err.Error(), "faults: injected "+fault)
}

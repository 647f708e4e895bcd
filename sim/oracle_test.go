package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/faults"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/worker"
)

// oracleWorld returns a portfolio world for seed 1 with the oracle on.
func oracleWorld(t *testing.T) *World {
	t.Helper()
	w, err := newWorld(scenarios.Portfolio(), 1, DefaultMix(worker.Plain), worldOptions{})
	require.NoError(t, err)
	t.Cleanup(w.close)
	require.Nil(t, w.checker.check())
	return w
}

func oracleRequest(key string) model.SubmitRequest {
	return model.SubmitRequest{User: "ora", Key: key, Payload: `{"steps":[{"cost":1}]}`, CostBudget: 5, StepsMax: 5}
}

// A reference that disagrees with the queue is reported at the next
// operation: here the reference alone cancelled the task, so the claim
// returns a task from the queue and none from the reference.
func TestLockstepReportsADivergence(t *testing.T) {
	w := oracleWorld(t)
	res, err := w.q.Submit(w.ctx, oracleRequest("k1"))
	require.NoError(t, err)
	require.Nil(t, w.checker.check())
	_, err = w.q.ref.Cancel(w.ctx, res.TaskID, "someone")
	require.NoError(t, err)
	_, err = w.q.Claim(w.ctx, model.ClaimRequest{Worker: "w0", Max: 1, Lease: time.Second})
	require.NoError(t, err)
	v := w.checker.check()
	require.NotNil(t, v)
	require.Equal(t, InvOracleReturns, v.Invariant, v.Error())
	require.Contains(t, v.Detail, "1 tasks from the queue, 0 from the reference")
}

// A commit that applies but reports failure is matched with the applied
// successor, one that rolls back with the unapplied one; the reference
// follows the real queue either way, and nothing is reported.
func TestLockstepAcceptsBothSuccessorsOfAnUnknownCommit(t *testing.T) {
	w := oracleWorld(t)
	w.storage.Arm(faults.AmbiguousCommit)
	_, err := w.q.Submit(w.ctx, oracleRequest("applied"))
	require.ErrorIs(t, err, faults.ErrInjected)
	w.storage.Arm(faults.FailCommit)
	_, err = w.q.Submit(w.ctx, oracleRequest("rolled-back"))
	require.ErrorIs(t, err, faults.ErrInjected)
	require.Nil(t, w.checker.check())
	tasks, err := w.q.ref.List(w.ctx, model.ListFilter{User: "ora"})
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	require.Equal(t, "applied", tasks[0].Key)
	// The retry of each is a replay and a fresh submit, on both sides.
	for key, replay := range map[string]bool{"applied": true, "rolled-back": false} {
		res, err := w.q.Submit(w.ctx, oracleRequest(key))
		require.NoError(t, err)
		require.Equal(t, replay, res.Replay, key)
	}
	require.Nil(t, w.checker.check())
}

// A fault before COMMIT leaves the operation unapplied: the reference is
// not advanced, and a real queue that applied it anyway would disagree.
func TestLockstepFaultBeforeCommitIsNotApplied(t *testing.T) {
	w := oracleWorld(t)
	w.storage.Arm(faults.FailStatement)
	_, err := w.q.Submit(w.ctx, oracleRequest("k1"))
	require.ErrorIs(t, err, faults.ErrInjected)
	require.Nil(t, w.checker.check())
	_, err = w.q.ref.Task(w.ctx, model.NewDerivedIDs(subSeed(1, streamIDs)).KeyedID(model.TaskIDPrefix, model.TaskKey("ora", "k1")))
	require.ErrorIs(t, err, model.ErrNotFound)
}

// Switching a check off keeps its violations from being reported.
func TestOnlyKeepsTheNamedChecks(t *testing.T) {
	w, err := newWorld(scenarios.Portfolio(), 1, DefaultMix(worker.Plain), worldOptions{only: []string{InvOracleEvents}})
	require.NoError(t, err)
	defer w.close()
	res, err := w.q.Submit(w.ctx, oracleRequest("k1"))
	require.NoError(t, err)
	_, err = w.q.ref.Cancel(w.ctx, res.TaskID, "someone")
	require.NoError(t, err)
	_, err = w.q.Claim(w.ctx, model.ClaimRequest{Worker: "w0", Max: 1, Lease: time.Second})
	require.NoError(t, err)
	v := w.checker.check()
	require.NotNil(t, v, "the claim's events differ too")
	require.Equal(t, InvOracleEvents, v.Invariant, v.Error())
}

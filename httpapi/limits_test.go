package httpapi

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/model"
)

// TestClientChangesOnlyTheLimitsItNames: PUT /v1/limits {"depth_max":2}
// was refused for the limits it did not send (attempts_max: must be
// between 1 and 100, got 0); through the client, UpdateLimits and
// UpdateUserLimit change the limits they name and leave the rest, and a
// change naming none is bad input.
func TestClientChangesOnlyTheLimitsItNames(t *testing.T) {
	a := setupAPI(t)
	ctx := t.Context()
	ops := a.clientFor(t, secretOperate)

	v, err := ops.UpdateLimits(ctx, client.LimitsChange{DepthMax: client.Value(2)})
	require.NoError(t, err)
	want := model.DefaultLimits
	want.DepthMax = 2
	require.Equal(t, client.Limits(want), v.Limits)
	v, err = ops.UpdateLimits(ctx, client.LimitsChange{AttemptsMax: client.Value(5), GrantCostMax: client.Value(int64(7))})
	require.NoError(t, err)
	want.AttemptsMax, want.GrantCostMax = 5, 7
	require.Equal(t, client.Limits(want), v.Limits, "depth_max stays 2")
	stored, _, err := a.q.Limits(ctx)
	require.NoError(t, err)
	require.Equal(t, want, stored)

	_, err = ops.UpdateLimits(ctx, client.LimitsChange{})
	requireRefusal(t, err, client.ErrBadInput, "body")
	_, err = ops.UpdateLimits(ctx, client.LimitsChange{ClaimBatchMax: client.Value(0)})
	requireRefusal(t, err, client.ErrBadInput, "claim_batch_max")

	v, err = ops.UpdateUserLimit(ctx, "carol", client.UserLimitChange{RunningMax: client.Value(2)})
	require.NoError(t, err)
	require.Equal(t, []client.UserLimit{{User: "carol", RunningMax: 2, DepthMax: model.Inherit}}, v.Users)
	v, err = ops.UpdateUserLimit(ctx, "carol", client.UserLimitChange{DepthMax: client.Value(0)})
	require.NoError(t, err)
	require.Equal(t, []client.UserLimit{{User: "carol", RunningMax: 2, DepthMax: 0}}, v.Users, "running_max stays 2")
	_, err = ops.UpdateUserLimit(ctx, "carol", client.UserLimitChange{})
	requireRefusal(t, err, client.ErrBadInput, "body")
}

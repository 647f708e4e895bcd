package model

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckTaskID(t *testing.T) {
	for _, id := range []string{"t_0", "t_00000000deadbeef", NewSeededIDs(3).NewID(TaskIDPrefix), "t_" + strings.Repeat("a", 62)} {
		require.NoError(t, CheckTaskID(id), id)
	}
	for _, id := range []string{"", "t_", "s_00ff", "T_00ff", "t_00FF", "t_00fg", "t_00 ff", "t_" + strings.Repeat("a", 63), "x t_00ff"} {
		err := CheckTaskID(id)
		require.ErrorIs(t, err, ErrInvalidInput, "%q", id)
		var v *ValidationError
		require.True(t, errors.As(err, &v))
		require.Equal(t, "task", v.Field)
		require.Contains(t, v.Problem, "not a task ID")
	}
}

func TestCheckOperationID(t *testing.T) {
	require.NoError(t, CheckOperationID(OperationID("t_00ff", 0)))
	require.NoError(t, CheckOperationID(OperationID("t_00ff", 12)))
	for _, op := range []string{"", "t_00ff", "t_00ff.s", "t_00ff.s-1", "t_00ff.s01", "t_00ff.s+1", "t_zz.s1", "t_00ff.a1", "t_00ff.s1.s2"} {
		err := CheckOperationID(op)
		require.ErrorIs(t, err, ErrInvalidInput, "%q", op)
		var v *ValidationError
		require.True(t, errors.As(err, &v))
		require.Equal(t, "operation", v.Field)
	}
}

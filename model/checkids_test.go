package model

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCheckTaskID: the one rule of a task ID (TaskIDRule, TaskIDPattern):
// t_ and 1 to 62 letters, digits or hyphens, so the IDs a program's own
// ID source hands out (UUIDs, ULIDs) are IDs the command line and the API
// take; never a '.', which separates the step of an operation ID.
func TestCheckTaskID(t *testing.T) {
	pattern := regexp.MustCompile(TaskIDPattern)
	good := []string{"t_0", "t_00000000deadbeef", NewSeededIDs(3).NewID(TaskIDPrefix), "t_" + strings.Repeat("a", 62),
		"t_550e8400-e29b-41d4-a716-446655440000", "t_01ARZ3NDEKTSV4RRFFQ69G5FAV", "t_00FF", "t_zz"}
	bad := []string{"", "t_", "s_00ff", "T_00ff", "t_00 ff", "t_" + strings.Repeat("a", 63), "x t_00ff", "t_00ff.s1",
		"t_a_b", "t_é", "t_00ff\n", "t_/etc"}
	for _, id := range good {
		require.NoError(t, CheckTaskID(id), id)
		require.True(t, pattern.MatchString(id), "the pattern takes %q", id)
		require.NoError(t, CheckNewTaskID(id), id)
	}
	for _, id := range bad {
		err := CheckTaskID(id)
		require.ErrorIs(t, err, ErrInvalidInput, "%q", id)
		var v *ValidationError
		require.True(t, errors.As(err, &v))
		require.Equal(t, "task", v.Field)
		require.Contains(t, v.Problem, "not a task ID ("+TaskIDRule+")")
		require.False(t, pattern.MatchString(id), "the pattern refuses %q", id)
		err = CheckNewTaskID(id)
		require.ErrorIs(t, err, ErrBadIDSource, "%q", id)
		require.NotErrorIs(t, err, ErrInvalidInput, "a bad ID source is not the caller's bad input")
	}
}

// uuidIDs hands out task IDs shaped like UUIDs, as a program's own
// IDSource might.
type uuidIDs struct{ n int }

func (u *uuidIDs) NewID(prefix string) string {
	u.n++
	return fmt.Sprintf("%s550e8400-e29b-41d4-a716-%012x", prefix, u.n)
}

// badIDs hands out IDs no command could name.
type badIDs struct{}

func (badIDs) NewID(prefix string) string { return prefix + "task 1" }

// TestReferenceChecksItsIDSource: the reference model, like the queue,
// takes an ID source's IDs that follow TaskIDRule and refuses one that
// does not with ErrBadIDSource, storing nothing (a batch: none of it).
func TestReferenceChecksItsIDSource(t *testing.T) {
	ctx := context.Background()
	clock := &stepClock{at: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	req := SubmitRequest{User: "ana", Key: "k1", Payload: `{"steps":[]}`, CostBudget: 1, StepsMax: 1}

	r := NewReference(ReferenceOptions{Clock: clock, IDs: &uuidIDs{}, Rand: rand.New(rand.NewPCG(1, 2))})
	res, err := r.Submit(ctx, req)
	require.NoError(t, err)
	require.Equal(t, "t_550e8400-e29b-41d4-a716-000000000001", res.TaskID)

	r = NewReference(ReferenceOptions{Clock: clock, IDs: badIDs{}, Rand: rand.New(rand.NewPCG(1, 2))})
	_, err = r.Submit(ctx, req)
	require.ErrorIs(t, err, ErrBadIDSource)
	req2 := req
	req2.Key = "k2"
	_, err = r.SubmitMany(ctx, []SubmitRequest{req, req2})
	require.ErrorIs(t, err, ErrBadIDSource)
	tasks, err := r.List(ctx, ListFilter{Limit: ListLimitMax})
	require.NoError(t, err)
	require.Empty(t, tasks)
	events, err := r.Events(ctx, "")
	require.NoError(t, err)
	require.Empty(t, events)
}

func TestCheckOperationID(t *testing.T) {
	require.NoError(t, CheckOperationID(OperationID("t_00ff", 0)))
	require.NoError(t, CheckOperationID(OperationID("t_00ff", 12)))
	for _, op := range []string{"", "t_00ff", "t_00ff.s", "t_00ff.s-1", "t_00ff.s01", "t_00ff.s+1", "t_00ff.a1", "t_00ff.s1.s2"} {
		err := CheckOperationID(op)
		require.ErrorIs(t, err, ErrInvalidInput, "%q", op)
		var v *ValidationError
		require.True(t, errors.As(err, &v))
		require.Equal(t, "operation", v.Field)
	}
}

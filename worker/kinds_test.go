package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/worker"
	"github.com/leasehold/leasehold/worker/workertest"
)

// TestKindsRouteEachTaskToItsHandler: a worker whose handler is a Kinds
// runs each claimed task by its kind's handler, needs no Service when no
// kind's handler makes effects, and never claims a task of a kind it has
// no handler for, which stays queued.
func TestKindsRouteEachTaskToItsHandler(t *testing.T) {
	b := setup(t)
	ran := map[string]string{}
	handler := func(name string) worker.Handler {
		return worker.HandlerFunc(func(_ context.Context, task model.Task, opID string) (string, error) {
			ran[task.ID] = name
			require.Equal(t, model.OperationID(task.ID, 0), opID)
			return name + " done", nil
		})
	}
	kinds := worker.Kinds{"report": {Handler: handler("report")}, "email": {Handler: handler("email")}}
	w := b.newWorker("w1", nil, func(c *worker.Config) { c.Handler = kinds })
	submit := func(key, kind string) string {
		return b.submitRequest(model.SubmitRequest{User: "ana", Key: key, Kind: kind, Payload: `{"any":["json",1]}`,
			CostBudget: 5, StepsMax: 3})
	}
	report, email, other, synthetic := submit("r", "report"), submit("e", "email"), submit("o", "other"), submit("s", "")
	b.run(w, stepsMax)
	require.Equal(t, map[string]string{report: "report", email: "email"}, ran)
	for id, kind := range map[string]string{report: "report", email: "email"} {
		task := b.task(id)
		require.Equal(t, model.Completed, task.State, id)
		require.Equal(t, kind+" done", task.Result(), "the result is what the handler returned")
	}
	for _, id := range []string{other, synthetic} {
		task := b.task(id)
		require.Equal(t, model.Queued, task.State, "a task of a kind the worker does not serve: %s", task.Kind)
		require.Zero(t, task.Attempt)
		require.Empty(t, task.Result())
	}
}

// TestKindsNeedAServiceOnlyForEffects: a registry holding a handler that
// may declare ledgered effects needs a Service, as that handler alone
// would; a registry without handlers, or naming a bad kind, is refused.
func TestKindsNeedAServiceOnlyForEffects(t *testing.T) {
	b := setup(t)
	plain := worker.HandlerFunc(func(context.Context, model.Task, string) (string, error) { return "", nil })
	for _, c := range []struct {
		name  string
		kinds worker.Kinds
		ok    bool
	}{
		{"plain", worker.Kinds{"a": {Handler: plain}}, true},
		{"effects", worker.Kinds{"a": {Handler: plain}, model.KindSynthetic: worker.SyntheticKind()}, false},
		{"empty", worker.Kinds{}, false},
		{"no handler", worker.Kinds{"a": {}}, false},
		{"bad name", worker.Kinds{"Bad": {Handler: plain}}, false},
	} {
		_, err := worker.New(worker.Config{ID: "w", Queue: b.q, Handler: c.kinds, Clock: b.clock})
		if c.ok {
			require.NoError(t, err, c.name)
		} else {
			require.Error(t, err, c.name)
		}
	}
}

// TestKindsValidators: a registry's validators are those of its kinds
// that have one, under their kinds' names.
func TestKindsValidators(t *testing.T) {
	refuse := errors.New("no")
	kinds := worker.Kinds{
		"a":                 {Handler: worker.Synthetic{}, Validate: func(json.RawMessage) error { return refuse }},
		"b":                 {Handler: worker.Synthetic{}},
		model.KindSynthetic: worker.SyntheticKind(),
	}
	v := kinds.Validators()
	require.Len(t, v, 2)
	require.ErrorIs(t, v["a"](json.RawMessage(`{}`)), refuse)
	require.Error(t, v[model.KindSynthetic](json.RawMessage(`{"x":1}`)))
	require.NoError(t, v[model.KindSynthetic](json.RawMessage(`{"steps":[{"cost":1}]}`)))
	require.Equal(t, []string{"a", "b", model.KindSynthetic}, kinds.Served())
}

// TestRunnerClaimsOnlyItsKinds: a live runner whose handler is a Kinds
// claims tasks of its kinds only, by its claimer and by the claims its
// completions make (CompleteAndClaim); the other kind's tasks stay
// queued, never claimed.
func TestRunnerClaimsOnlyItsKinds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		l := newLive(b)
		var mine, other []string
		for i := range 6 {
			kind := "report"
			if i%3 == 2 {
				kind = "other"
			}
			id := b.submitRequest(model.SubmitRequest{User: "ana", Key: fmt.Sprintf("k%d", i), Kind: kind,
				Payload: `{"steps":[{"cost":1,"duration_ms":1000}]}`, CostBudget: 10, StepsMax: 5})
			if kind == "report" {
				mine = append(mine, id)
			} else {
				other = append(other, id)
			}
		}
		kinds := worker.Kinds{"report": {Handler: worker.Synthetic{}}}
		lr := l.start("w1", newLiveService(worker.Dedup, nil), func(c *worker.Config, _ *worker.RunOptions) {
			c.Concurrency, c.Handler = 2, kinds
		})
		l.drive(100, nil, func() bool { return l.all(mine, model.Completed) })
		lr.stop(t)
		refilled := 0
		for _, c := range l.q.refillCalls() {
			refilled += c.claimed
		}
		require.Positive(t, refilled, "completions claimed the next tasks")
		for _, id := range other {
			task := b.task(id)
			require.Equal(t, model.Queued, task.State, id)
			require.Zero(t, task.Version, "%s was never claimed", id)
		}
		l.checkReports()
	})
}

// TestRefillClaimsOnlyItsKinds: a stepped worker with Refill whose handler
// is a Kinds names its kinds in the claims its completions make, as its
// claimer does: the other kind's task, first in claim order, is never
// claimed, while the worker's own tasks all complete.
func TestRefillClaimsOnlyItsKinds(t *testing.T) {
	b := setup(t)
	submit := func(key, kind string, priority int) string {
		return b.submitRequest(model.SubmitRequest{User: "ana", Key: key, Kind: kind, Priority: priority,
			Payload: `{"steps":[{"cost":1}]}`, CostBudget: 10, StepsMax: 5})
	}
	first := submit("k0", "report", 5)
	other := submit("k1", "other", 3)
	mine := []string{first, submit("k2", "report", 1), submit("k3", "report", 1)}
	w := b.newWorker("w1", workertest.NewService(worker.Dedup, b.clock), func(c *worker.Config) {
		c.Refill, c.Handler = true, worker.Kinds{"report": {Handler: worker.Synthetic{}}}
	})
	refilled := 0
	for _, r := range b.run(w, stepsMax) {
		if r.Action == worker.ActionComplete {
			refilled += len(r.Claims)
		}
	}
	require.Equal(t, 2, refilled, "each completion but the last claimed the next report")
	for _, id := range mine {
		require.Equal(t, model.Completed, b.task(id).State, id)
	}
	task := b.task(other)
	require.Equal(t, model.Queued, task.State)
	require.Zero(t, task.Version, "the other kind's task was never claimed")
}

package queue

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/faults/storagefault"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
)

func batchRequests(n int) []model.SubmitRequest {
	var reqs []model.SubmitRequest
	for i := range n {
		r := model.SubmitRequest{User: fmt.Sprintf("u%d", i%3), Key: fmt.Sprintf("k%d", i), Payload: `{"steps":[{"cost":1}]}`,
			CostBudget: 10, StepsMax: 5, Priority: i%3 - 1}
		if i%4 == 0 {
			r.RunAt, r.Deadline = epoch.Add(time.Duration(i)*time.Second), epoch.Add(time.Hour)
		}
		reqs = append(reqs, r)
	}
	return reqs
}

// SubmitMany writes exactly what Submit writes for each request, one by
// one: the same tasks, events, metrics and counters (a user under a
// running limit covers the claim flags).
func TestSubmitManyWritesWhatSubmitWrites(t *testing.T) {
	reqs := batchRequests(40)
	build := func(bulk bool) *bundle {
		b := setup(t)
		require.NoError(t, b.q.SetUserLimit(b.ctx, model.UserLimit{User: "u0", RunningMax: 1, DepthMax: model.Inherit}, "test"))
		if bulk {
			res, err := b.q.SubmitMany(b.ctx, reqs)
			require.NoError(t, err)
			require.Len(t, res, len(reqs))
		} else {
			for _, r := range reqs {
				_, err := b.q.Submit(b.ctx, r)
				require.NoError(t, err)
			}
		}
		require.NoError(t, b.q.CheckCounters(b.ctx))
		return b
	}
	one, bulk := build(false), build(true)
	all := model.ListFilter{Limit: model.ListLimitMax}
	want, err := one.q.List(one.ctx, all)
	require.NoError(t, err)
	got, err := bulk.q.List(bulk.ctx, all)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Equal(t, one.events(""), bulk.events(""))
	wantMetrics, err := one.q.Metrics(one.ctx)
	require.NoError(t, err)
	gotMetrics, err := bulk.q.Metrics(bulk.ctx)
	require.NoError(t, err)
	require.Equal(t, wantMetrics, gotMetrics)
	// The first claim of each takes the same task.
	c1, c2 := one.claim("w1"), bulk.claim("w1")
	require.Equal(t, c1.Claim.TaskID, c2.Claim.TaskID)
}

// The payload validator refuses a batch at the request it refuses, naming
// the payload's field.
func TestSubmitManyValidatesPayloads(t *testing.T) {
	b := setup(t, func(o *Options) {
		o.Validators = map[string]model.PayloadValidator{model.KindSynthetic: func(payload json.RawMessage) error {
			if string(payload) == `{"bad":true}` {
				return &model.ValidationError{Field: "bad", Problem: "not allowed"}
			}
			return nil
		}}
	})
	reqs := batchRequests(3)
	reqs[1].Payload = `{"bad":true}`
	_, err := b.q.SubmitMany(b.ctx, reqs)
	var item *model.BatchItemError
	require.True(t, errors.As(err, &item))
	require.Equal(t, 1, item.Index)
	var v *model.ValidationError
	require.True(t, errors.As(err, &v))
	require.Equal(t, "payload.bad", v.Field)
	require.Empty(t, b.events(""))
}

// A batch whose COMMIT fails is not acknowledged: ErrOutcomeUnknown, and
// nothing of it is in the database.
func TestSubmitManyCommitFailure(t *testing.T) {
	g := setupGroup(t)
	g.storage.Arm(storagefault.FailCommit)
	_, err := g.q.SubmitMany(g.ctx, batchRequests(10))
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	require.ErrorIs(t, err, storagefault.ErrInjected)
	require.Zero(t, g.taskCount())
	res, err := g.q.SubmitMany(g.ctx, batchRequests(10))
	require.NoError(t, err)
	require.Len(t, res, 10)
	require.Equal(t, 10, g.taskCount())
}

// mixedBatch is a batch of new tasks of three users, exact replays of
// stored tasks (stored, submitted first) and of a pruned one (its
// tombstone), and exact replays of its own earlier requests.
func mixedBatch() (pruned model.SubmitRequest, stored, batch []model.SubmitRequest) {
	reqs := batchRequests(16)
	pruned, stored, fresh := reqs[0], reqs[1:6], reqs[6:]
	for i := range fresh { // submitted after prepareMixed's two days
		if !fresh[i].Deadline.IsZero() {
			fresh[i].Deadline = fresh[i].Deadline.Add(72 * time.Hour)
		}
	}
	batch = []model.SubmitRequest{
		fresh[0], stored[1], fresh[1], fresh[0], pruned, fresh[2], stored[4], fresh[3],
		fresh[1], fresh[4], fresh[5], stored[1], fresh[6], fresh[7], fresh[2], fresh[8], fresh[9],
	}
	return pruned, stored, batch
}

// prepareMixed stores what mixedBatch's replays replay: pruned, completed,
// then stored, and two days later prunes pruned.
func prepareMixed(b *bundle, pruned model.SubmitRequest, stored []model.SubmitRequest) []model.SubmitResult {
	b.t.Helper()
	_, err := b.q.Submit(b.ctx, pruned)
	require.NoError(b.t, err)
	require.NoError(b.t, b.q.Complete(b.ctx, b.claim("w0").Claim))
	var out []model.SubmitResult
	for _, r := range stored {
		res, err := b.q.Submit(b.ctx, r)
		require.NoError(b.t, err)
		out = append(out, res)
	}
	b.clock.Advance(48 * time.Hour)
	res, err := b.q.Prune(b.ctx, PruneRequest{OlderThan: 24 * time.Hour, Actor: "ops"})
	require.NoError(b.t, err)
	require.Equal(b.t, map[model.State]int64{model.Completed: 1}, res.Tasks)
	return out
}

// A batch mixing new tasks of several users, replays of stored and pruned
// tasks and replays of its own requests gives the same results, tasks,
// events, metrics and counters as its requests submitted one by one.
func TestSubmitManyMixedBatchIsItsRequestsOneByOne(t *testing.T) {
	stores(t, func(t *testing.T, store string) { testMixedBatch(t, store) })
}

// setupStore is setup on the named store: SQLite in memory, or a fresh
// PostgreSQL schema.
func setupStore(t *testing.T, store string) *bundle {
	t.Helper()
	if store == "postgres" {
		return openBundle(t, pgtest.Fresh(t, migratePostgresURL), clockwork.NewFakeClockAt(epoch), 1)
	}
	return setup(t)
}

func testMixedBatch(t *testing.T, store string) {
	pruned, stored, batch := mixedBatch()
	build := func(bulk bool) (*bundle, []model.SubmitResult, []model.SubmitResult) {
		b := setupStore(t, store)
		require.NoError(t, b.q.SetUserLimit(b.ctx, model.UserLimit{User: "u1", RunningMax: 1, DepthMax: model.Inherit}, "test"))
		before := prepareMixed(b, pruned, stored)
		var res []model.SubmitResult
		if bulk {
			var err error
			res, err = b.q.SubmitMany(b.ctx, batch)
			require.NoError(t, err)
		} else {
			for _, r := range batch {
				one, err := b.q.Submit(b.ctx, r)
				require.NoError(t, err)
				res = append(res, one)
			}
		}
		require.NoError(t, b.q.CheckCounters(b.ctx))
		return b, before, res
	}
	one, before, want := build(false)
	bulk, _, got := build(true)
	require.Equal(t, want, got)
	// The replays are replays of what they replay.
	require.Equal(t, model.SubmitResult{TaskID: before[1].TaskID, Replay: true}, got[1])
	require.Equal(t, model.SubmitResult{TaskID: got[0].TaskID, Replay: true}, got[3])
	require.True(t, got[4].Replay)
	require.Equal(t, model.SubmitResult{TaskID: before[4].TaskID, Replay: true}, got[6])
	require.False(t, got[0].Replay)
	all := model.ListFilter{Limit: model.ListLimitMax}
	wantTasks, err := one.q.List(one.ctx, all)
	require.NoError(t, err)
	gotTasks, err := bulk.q.List(bulk.ctx, all)
	require.NoError(t, err)
	require.Equal(t, wantTasks, gotTasks)
	require.Len(t, gotTasks, len(stored)+10)
	require.Equal(t, one.events(""), bulk.events(""))
	wantMetrics, err := one.q.Metrics(one.ctx)
	require.NoError(t, err)
	gotMetrics, err := bulk.q.Metrics(bulk.ctx)
	require.NoError(t, err)
	require.Equal(t, wantMetrics, gotMetrics)
	for range 3 { // claim order follows submission order alike
		require.Equal(t, one.claim("w1").Claim.TaskID, bulk.claim("w1").Claim.TaskID)
	}
}

// A batch is refused at the request, and with the refusal, that its
// requests submitted one by one would first meet (the depth caps counting
// the batch's earlier new tasks, replays taking no room), and writes
// nothing.
func TestSubmitManyRefusesWhereOneByOneWould(t *testing.T) {
	stores(t, func(t *testing.T, store string) { testRefusals(t, store) })
}

func testRefusals(t *testing.T, store string) {
	pruned, stored, batch := mixedBatch()
	changed := stored[2]
	changed.CostBudget++
	changedPruned := pruned
	changedPruned.StepsMax++
	for _, c := range []struct {
		name   string
		limits func(*model.Limits)
		batch  []model.SubmitRequest
		want   error
	}{
		{"user depth", func(l *model.Limits) { l.UserDepthMax = 4 }, batch, model.ErrQueueFull},
		{"total depth", func(l *model.Limits) { l.DepthMax = 11 }, batch, model.ErrQueueFull},
		{"changed stored", nil, append(batch[:7:7], changed), model.ErrIdempotencyConflict},
		{"changed pruned", nil, append(batch[:5:5], changedPruned), model.ErrIdempotencyConflict},
	} {
		t.Run(c.name, func(t *testing.T) {
			refusal := func(bulk bool) (*bundle, *model.BatchItemError) {
				b := setupStore(t, store)
				limits := model.DefaultLimits
				if c.limits != nil {
					c.limits(&limits)
				}
				require.NoError(t, b.q.SetLimits(b.ctx, limits, "test"))
				prepareMixed(b, pruned, stored)
				if bulk {
					_, err := b.q.SubmitMany(b.ctx, c.batch)
					var item *model.BatchItemError
					require.True(t, errors.As(err, &item), "want a *model.BatchItemError, got %v", err)
					return b, item
				}
				for i, r := range c.batch {
					if _, err := b.q.Submit(b.ctx, r); err != nil {
						return b, &model.BatchItemError{Index: i, Err: err}
					}
				}
				t.Fatal("one by one, every request was stored")
				return nil, nil
			}
			one, want := refusal(false)
			bulk, got := refusal(true)
			require.ErrorIs(t, got, c.want)
			require.Equal(t, want.Index, got.Index)
			require.Equal(t, want.Err.Error(), got.Err.Error())
			count := func(b *bundle) int {
				tasks, err := b.q.List(b.ctx, model.ListFilter{Limit: model.ListLimitMax})
				require.NoError(t, err)
				return len(tasks)
			}
			require.Equal(t, len(stored), count(bulk), "a refused batch writes nothing")
			require.Greater(t, count(one), len(stored))
			require.NoError(t, bulk.q.CheckCounters(bulk.ctx))
		})
	}
}

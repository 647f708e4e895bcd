package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/model"
)

// SubmitBatchMax bounds the requests of one SubmitMany.
const SubmitBatchMax = model.SubmitBatchMax

// SubmitMany submits a batch of requests in one transaction, all or
// nothing. Every request is validated and normalized (as Submit does)
// before anything is written; a refusal of any request, then or in the
// transaction, refuses the whole batch with a *model.BatchItemError naming
// the request's index and wrapping its error, and writes nothing. Each
// exact replay, of an earlier task or of an earlier request in the batch,
// returns the original task's ID with Replay set; a changed request under
// a used key is a conflict. The depth caps (overall and per user) apply to
// the batch's new tasks as a whole: the batch is refused at the request
// that would pass one. The results are in the requests' order.
func (q *Queue) SubmitMany(ctx context.Context, reqs []model.SubmitRequest) ([]model.SubmitResult, error) {
	if err := model.CheckBatchSize(len(reqs)); err != nil {
		return nil, err
	}
	ns := make([]model.Normalized, len(reqs))
	for i, req := range reqs {
		n, err := q.normalizeCaller(req)
		if err != nil {
			return nil, &model.BatchItemError{Index: i, Err: err}
		}
		ns[i] = n
	}
	var out []model.SubmitResult
	err := q.writeRetrying(ctx, "submit batch", func(t *txn) error {
		var err error
		out, err = t.submitMany(ns)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// normalizeCaller makes Submit's checks of a caller's request.
func (q *Queue) normalizeCaller(req model.SubmitRequest) (model.Normalized, error) {
	if req.ScheduleID != "" || req.ScheduleRun != 0 {
		return model.Normalized{}, &model.ValidationError{Field: "schedule_id", Problem: "set only by the scheduler"}
	}
	n, err := model.Normalize(req)
	if err != nil {
		return model.Normalized{}, err
	}
	if err := model.CheckCallerKey(n.Key); err != nil {
		return model.Normalized{}, err
	}
	if err := q.checkPayload(n.Payload); err != nil {
		return model.Normalized{}, err
	}
	return n, nil
}

// userDepth is a user's active tasks and depth cap, as read once per batch
// and counted on as the batch's tasks are inserted.
type userDepth struct{ active, limit int }

// submitMany stores a batch of normalized requests, or recognises their
// replays; the first refusal ends it (and the caller rolls back). It
// writes what submit writes for each new task, reading the limits, each
// user's depth and the active total once per batch instead of once per
// task.
func (t *txn) submitMany(ns []model.Normalized) ([]model.SubmitResult, error) {
	limits, err := t.limits()
	if err != nil {
		return nil, err
	}
	out := make([]model.SubmitResult, len(ns))
	depths := map[string]*userDepth{}
	total := -1 // the active total, read when first needed
	earlier := map[string]int{}
	for i, n := range ns {
		refuse := func(err error) ([]model.SubmitResult, error) {
			return nil, &model.BatchItemError{Index: i, Err: err}
		}
		key := model.TaskKey(n.User, n.Key)
		if j, ok := earlier[key]; ok {
			if ns[j].Hash != n.Hash {
				return refuse(model.BatchConflict(n, j))
			}
			out[i] = model.SubmitResult{TaskID: out[j].TaskID, Replay: true}
			continue
		}
		var id, hash string
		err := t.queryRow("task_by_key", sql.Named("user", n.User), sql.Named("key", n.Key)).Scan(&id, &hash)
		switch {
		case err == nil && hash == n.Hash:
			out[i] = model.SubmitResult{TaskID: id, Replay: true}
			continue
		case err == nil:
			return refuse(fmt.Errorf("user %s key %s is task %s: %w", n.User, n.Key, id, model.ErrIdempotencyConflict))
		case !errors.Is(err, sql.ErrNoRows):
			return nil, fmt.Errorf("queue: submit batch: look up key: %w", err)
		}
		if err := n.CheckTimely(t.now); err != nil {
			return refuse(err)
		}
		d, err := t.userDepth(depths, n.User)
		if err != nil {
			return nil, err
		}
		if d.limit > 0 && d.active >= d.limit {
			return refuse(fmt.Errorf("user %s has %d active tasks (limit %d): %w", n.User, d.active, d.limit, model.ErrQueueFull))
		}
		if limits.DepthMax > 0 {
			if total < 0 {
				if err := t.queryRow("active_total").Scan(&total); err != nil {
					return nil, fmt.Errorf("queue: admission: %w", err)
				}
			}
			if total >= limits.DepthMax {
				return refuse(fmt.Errorf("%d active tasks (limit %d): %w", total, limits.DepthMax, model.ErrQueueFull))
			}
		}
		res, err := t.insertTask(n, n.User, limits)
		if err != nil {
			return nil, err
		}
		out[i], earlier[key] = res, i
		d.active++
		total++
	}
	return out, nil
}

// userDepth returns the user's depth, creating the user's row and reading
// it on the batch's first task of the user.
func (t *txn) userDepth(depths map[string]*userDepth, user string) (*userDepth, error) {
	if d := depths[user]; d != nil {
		return d, nil
	}
	if _, err := t.exec("user_ensure", sql.Named("user", user)); err != nil {
		return nil, err
	}
	d := &userDepth{}
	if err := t.queryRow("user_depth", sql.Named("user", user)).Scan(&d.active, &d.limit); err != nil {
		return nil, fmt.Errorf("queue: admission: %w", err)
	}
	depths[user] = d
	return d, nil
}

// insertTask writes a new task and its submitted event (for Submit and
// SubmitMany alike).
func (t *txn) insertTask(n model.Normalized, actor string, limits model.Limits) (model.SubmitResult, error) {
	runAt := n.RunAt
	if runAt.IsZero() {
		runAt = t.now
	}
	id := t.q.newID(model.TaskIDPrefix, model.TaskKey(n.User, n.Key))
	if err := t.execOne("task_insert",
		sql.Named("id", id), sql.Named("user", n.User), sql.Named("key", n.Key),
		sql.Named("hash", n.Hash), sql.Named("payload", n.Payload), sql.Named("priority", n.Priority),
		sql.Named("run_at", model.Millis(runAt)), sql.Named("deadline", model.Millis(n.Deadline)),
		sql.Named("attempts_max", limits.AttemptsMax), sql.Named("now", model.Millis(t.now)),
		sql.Named("cost_budget", n.CostBudget), sql.Named("steps_max", n.StepsMax),
		sql.Named("schedule_id", n.ScheduleID), sql.Named("schedule_run", n.ScheduleRun)); err != nil {
		return model.SubmitResult{}, err
	}
	t.madeReady(runAt)
	if a := model.ActorOf(t.ctx); a != "" { // who submitted for the user (model.WithActor)
		actor = a
	}
	if err := t.emit(model.Event{TaskID: id, Kind: model.EventSubmitted, To: model.Queued, Actor: actor}); err != nil {
		return model.SubmitResult{}, err
	}
	return model.SubmitResult{TaskID: id}, nil
}

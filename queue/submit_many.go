package queue

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/leasehold/leasehold/internal/broken"
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
	n, err := q.Normalize(req)
	if err != nil {
		return model.Normalized{}, err
	}
	if err := model.CheckCallerKey(n.Key); err != nil {
		return model.Normalized{}, err
	}
	if err := q.checkPayload(n.Kind, n.Payload); err != nil {
		return model.Normalized{}, err
	}
	return n, nil
}

// userDepth is a user's active tasks and depth cap, as read once per batch
// and counted on as the batch's tasks are inserted.
type userDepth struct{ active, limit int }

// submitMany stores a batch of normalized requests, or recognises their
// replays; the first refusal ends it (and the caller rolls back). It
// decides as Submit would for each request in turn, counting the batch's
// new tasks on, but reads and writes by set: every key of the batch in
// one statement, the limits, its new tasks' users' depths and the active
// total once, then the new tasks in one statement and their submitted
// events in another.
func (t *txn) submitMany(ns []model.Normalized) ([]model.SubmitResult, error) {
	limits, err := t.limits()
	if err != nil {
		return nil, err
	}
	found, err := t.lookUpKeys(ns)
	if err != nil {
		return nil, err
	}
	adm, err := t.readAdmission(ns, found, limits)
	if err != nil {
		return nil, err
	}
	out, fresh, err := t.planBatch(ns, found, adm, limits)
	if err != nil {
		return nil, err
	}
	if err := t.insertBatch(fresh, limits); err != nil {
		return nil, err
	}
	return out, nil
}

// stored is the task, or the tombstone of a pruned one, under a key.
type stored struct{ id, hash string }

// lookUpKeys returns what the store holds under the batch's keys, by
// model.TaskKey: task_by_key for every key, in one statement.
func (t *txn) lookUpKeys(ns []model.Normalized) (map[string]stored, error) {
	var pairs [][2]string
	var keys []string
	seen := make(map[string]bool, len(ns))
	for _, n := range ns {
		key := model.TaskKey(n.User, n.Key)
		if !seen[key] {
			seen[key] = true
			pairs, keys = append(pairs, [2]string{n.User, n.Key}), append(keys, key)
		}
	}
	arg, err := json.Marshal(pairs)
	if err != nil {
		return nil, fmt.Errorf("queue: submit batch: look up keys: %w", err)
	}
	rows, err := t.query(qTasksByKeys, sql.Named("pairs", string(arg)))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	found := map[string]stored{}
	tombstone := map[string]bool{}
	for rows.Next() {
		var index, source int
		var s stored
		if err := rows.Scan(&index, &s.id, &s.hash, &source); err != nil {
			return nil, fmt.Errorf("queue: submit batch: look up keys: %w", err)
		}
		if index < 0 || index >= len(keys) {
			return nil, fmt.Errorf("queue: submit batch: look up keys: pair %d of %d", index, len(keys))
		}
		key := keys[index]
		if _, ok := found[key]; ok && !tombstone[key] { // as task_by_key: a task before a tombstone
			continue
		}
		found[key], tombstone[key] = s, source != 0
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("queue: submit batch: look up keys: %w", err)
	}
	return found, nil
}

// admission is what the depth caps of a batch are checked against: each
// user's depth, by user, and the active total (-1 when DepthMax is 0).
type admission struct {
	depths map[string]*userDepth
	total  int
}

// readAdmission admits the requests whose key the store does not hold
// (the batch's tasks that may be new) and ensures their users' rows,
// then reads those users' depths and, when DepthMax caps it, the active
// total: what userDepth and active_total read for the batch's first new
// task, before any is inserted. A batch with no new task reads nothing.
// Admission is told each such task's user once (a store that admits by
// slots needs how many tasks of each user it admits); the depths are
// read for each user once.
func (t *txn) readAdmission(ns []model.Normalized, found map[string]stored, limits model.Limits) (admission, error) {
	adm := admission{depths: map[string]*userDepth{}, total: -1}
	var admitted, users []string
	seen := map[string]bool{}
	for _, n := range ns {
		key := model.TaskKey(n.User, n.Key)
		if _, ok := found[key]; ok || seen[key] {
			continue
		}
		seen[key] = true
		admitted = append(admitted, n.User)
		if _, ok := adm.depths[n.User]; !ok {
			adm.depths[n.User] = nil
			users = append(users, n.User)
		}
	}
	if len(users) == 0 {
		return adm, nil
	}
	arg, err := json.Marshal(admitted)
	if err != nil {
		return admission{}, fmt.Errorf("queue: admission: %w", err)
	}
	if _, err := t.exec(qUsersEnsure, sql.Named("users", string(arg))); err != nil {
		return admission{}, err
	}
	if arg, err = json.Marshal(users); err != nil {
		return admission{}, fmt.Errorf("queue: admission: %w", err)
	}
	if err := t.readDepths(string(arg), adm.depths); err != nil {
		return admission{}, err
	}
	for _, user := range users {
		if adm.depths[user] == nil {
			return admission{}, fmt.Errorf("queue: admission: no row for user %s", user)
		}
	}
	if limits.DepthMax > 0 {
		if err := t.queryRow(qActiveTotal).Scan(&adm.total); err != nil {
			return admission{}, fmt.Errorf("queue: admission: %w", err)
		}
	}
	return adm, nil
}

// readDepths reads the depths of users (a JSON array) into depths.
func (t *txn) readDepths(users string, depths map[string]*userDepth) error {
	rows, err := t.query(qUsersDepth, sql.Named("users", users))
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var user string
		d := &userDepth{}
		if err := rows.Scan(&user, &d.active, &d.limit); err != nil {
			return fmt.Errorf("queue: admission: %w", err)
		}
		depths[user] = d
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("queue: admission: %w", err)
	}
	return nil
}

// batchRow is a new task of a batch, as tasks_insert reads it from a JSON
// array.
type batchRow struct {
	ID          string `json:"i"`
	User        string `json:"u"`
	Key         string `json:"k"`
	Hash        string `json:"h"`
	Kind        string `json:"kd"`
	Payload     string `json:"p"`
	Priority    int    `json:"r"`
	RunAt       int64  `json:"t"`
	Deadline    int64  `json:"d"`
	CostBudget  int64  `json:"c"`
	StepsMax    int    `json:"s"`
	ScheduleID  string `json:"si"`
	ScheduleRun int64  `json:"sr"`
}

// submittedEvent is a new task's submitted event, as events_insert reads
// it from a JSON array: the task and the actor.
type submittedEvent struct {
	ID    string `json:"i"`
	Actor string `json:"a"`
}

// planBatch decides each request in turn, as Submit would after the
// batch's earlier ones: a replay of an earlier request or of a stored
// task, a conflict, or a new task (its ID drawn now, in the batch's
// order) within the depth caps, counted on for the requests after it.
func (t *txn) planBatch(ns []model.Normalized, found map[string]stored, adm admission, limits model.Limits) ([]model.SubmitResult, newTasks, error) {
	out := make([]model.SubmitResult, len(ns))
	var fresh newTasks
	earlier := map[string]int{}
	for i, n := range ns {
		key := model.TaskKey(n.User, n.Key)
		if j, ok := earlier[key]; ok {
			if broken.Pick(broken.BatchChangedReplayed, ns[j].Hash != n.Hash, false) {
				return nil, newTasks{}, &model.BatchItemError{Index: i, Err: model.BatchConflict(n, j)}
			}
			out[i] = model.SubmitResult{TaskID: out[j].TaskID, Replay: true}
			continue
		}
		if s, ok := found[key]; ok {
			if broken.Pick(broken.BatchChangedReplayed, s.hash != n.Hash, false) {
				err := fmt.Errorf("user %s key %s is task %s: %w", n.User, n.Key, s.id, model.ErrIdempotencyConflict)
				return nil, newTasks{}, &model.BatchItemError{Index: i, Err: err}
			}
			out[i] = model.SubmitResult{TaskID: s.id, Replay: true}
			continue
		}
		if err := t.admitNew(n, adm, limits); err != nil {
			return nil, newTasks{}, &model.BatchItemError{Index: i, Err: err}
		}
		row, event, err := t.newRow(n)
		if err != nil {
			return nil, newTasks{}, err
		}
		fresh.rows, fresh.events = append(fresh.rows, row), append(fresh.events, event)
		out[i], earlier[key] = model.SubmitResult{TaskID: row.ID}, i
		adm.depths[n.User].active++
		adm.total++
	}
	return out, fresh, nil
}

// admitNew refuses a new task that is not timely or would pass a depth
// cap, with Submit's refusals.
func (t *txn) admitNew(n model.Normalized, adm admission, limits model.Limits) error {
	if err := n.CheckTimely(t.now); err != nil {
		return err
	}
	d := adm.depths[n.User]
	if d.limit > 0 && d.active >= d.limit {
		return fmt.Errorf("user %s has %d active tasks (limit %d): %w", n.User, d.active, d.limit, model.ErrQueueFull)
	}
	if limits.DepthMax > 0 && adm.total >= limits.DepthMax {
		return fmt.Errorf("%d active tasks (limit %d): %w", adm.total, limits.DepthMax, model.ErrQueueFull)
	}
	return nil
}

// newRow draws a new task's ID and returns its row and its submitted
// event's, as insertTask would write them.
func (t *txn) newRow(n model.Normalized) (batchRow, submittedEvent, error) {
	runAt := n.RunAt
	if runAt.IsZero() {
		runAt = t.now
	}
	t.madeReady(runAt)
	actor := submitter(t.ctx, n.User)
	id, err := t.q.newID(model.TaskIDPrefix, model.TaskKey(n.User, n.Key))
	if err != nil {
		return batchRow{}, submittedEvent{}, err
	}
	return batchRow{
		ID: id, User: n.User, Key: n.Key,
		Hash: n.Hash, Kind: n.Kind, Payload: n.Payload, Priority: n.Priority, RunAt: model.Millis(runAt),
		Deadline: model.Millis(n.Deadline), CostBudget: n.CostBudget, StepsMax: n.StepsMax,
		ScheduleID: n.ScheduleID, ScheduleRun: n.ScheduleRun,
	}, submittedEvent{ID: id, Actor: actor}, nil
}

// newTasks are a batch's new tasks and their submitted events, in the
// batch's order.
type newTasks struct {
	rows   []batchRow
	events []submittedEvent
}

// trailedRow is a new task of a batch with its submitted event's actor,
// as submit_batch reads it from a JSON array.
type trailedRow struct {
	batchRow
	Actor string `json:"a"`
}

// insertBatch writes a batch's new tasks and their submitted events, two
// statements however many there are, or one where the store writes them
// together (seam.Capabilities.SubmitBatch).
func (t *txn) insertBatch(fresh newTasks, limits model.Limits) error {
	rows := fresh.rows
	if len(rows) == 0 {
		return nil
	}
	if t.q.store.Capabilities().SubmitBatch {
		return t.insertBatchTrailed(fresh, limits)
	}
	arg, err := json.Marshal(rows)
	if err != nil {
		return fmt.Errorf("queue: submit batch: %w", err)
	}
	events, err := json.Marshal(fresh.events)
	if err != nil {
		return fmt.Errorf("queue: submit batch: %w", err)
	}
	n, err := t.exec(qTasksInsert, sql.Named("rows", string(arg)),
		sql.Named("attempts_max", limits.AttemptsMax), sql.Named("now", model.Millis(t.now)))
	if err != nil {
		return err
	}
	if n != int64(len(rows)) {
		return fmt.Errorf("queue: tasks_insert: affected %d rows, expected %d", n, len(rows))
	}
	n, err = t.exec(qEventsInsert, sql.Named("events", string(events)),
		sql.Named("kind", string(model.EventSubmitted)), sql.Named("to_state", string(model.Queued)),
		sql.Named("at", model.Millis(t.now)), sql.Named("scope", model.ScopeOf(t.ctx)))
	if err != nil {
		return err
	}
	if n != int64(len(rows)) {
		return fmt.Errorf("queue: events_insert: affected %d rows, expected %d", n, len(rows))
	}
	return nil
}

// insertBatchTrailed writes a batch's new tasks, their keys and their
// submitted events as submit_batch, one statement.
func (t *txn) insertBatchTrailed(fresh newTasks, limits model.Limits) error {
	trailed := make([]trailedRow, len(fresh.rows))
	for i, row := range fresh.rows {
		trailed[i] = trailedRow{batchRow: row, Actor: fresh.events[i].Actor}
	}
	arg, err := json.Marshal(trailed)
	if err != nil {
		return fmt.Errorf("queue: submit batch: %w", err)
	}
	var n int64
	if err := t.queryRow(qSubmitBatch, sql.Named("rows", string(arg)), sql.Named("attempts_max", limits.AttemptsMax),
		sql.Named("now", model.Millis(t.now)), sql.Named("scope", model.ScopeOf(t.ctx))).Scan(&n); err != nil {
		return fmt.Errorf("queue: submit_batch: %w", err)
	}
	if n != int64(len(trailed)) {
		return fmt.Errorf("queue: submit_batch: inserted %d tasks, expected %d", n, len(trailed))
	}
	return nil
}

// insertTask writes a new task and its submitted event (for Submit and
// SubmitMany alike).
func (t *txn) insertTask(n model.Normalized, actor string, limits model.Limits) (model.SubmitResult, error) {
	runAt := n.RunAt
	if runAt.IsZero() {
		runAt = t.now
	}
	id, err := t.q.newID(model.TaskIDPrefix, model.TaskKey(n.User, n.Key))
	if err != nil {
		return model.SubmitResult{}, err
	}
	if err := t.execOne(qTaskInsert,
		sql.Named("id", id), sql.Named("user", n.User), sql.Named("key", n.Key),
		sql.Named("hash", n.Hash), sql.Named("kind", n.Kind), sql.Named("payload", n.Payload), sql.Named("priority", n.Priority),
		sql.Named("run_at", model.Millis(runAt)), sql.Named("deadline", model.Millis(n.Deadline)),
		sql.Named("attempts_max", limits.AttemptsMax), sql.Named("now", model.Millis(t.now)),
		sql.Named("cost_budget", n.CostBudget), sql.Named("steps_max", n.StepsMax),
		sql.Named("schedule_id", n.ScheduleID), sql.Named("schedule_run", n.ScheduleRun)); err != nil {
		return model.SubmitResult{}, err
	}
	t.madeReady(runAt)
	actor = submitter(t.ctx, actor)
	if err := t.emit(model.Event{TaskID: id, Kind: model.EventSubmitted, To: model.Queued, Actor: actor}); err != nil {
		return model.SubmitResult{}, err
	}
	return model.SubmitResult{TaskID: id}, nil
}

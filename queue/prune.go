package queue

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/model"
)

// Retention. A prune removes terminal tasks (completed, failed, cancelled:
// never a task in review, which waits for an operator) settled before a
// cutoff, with their events and effects, in transactions of at most a
// batch of tasks each (PruneBatchMax). It keeps:
//
//   - every task that is not terminal, and every terminal task with an
//     effect whose intent has no receipt (it is counted as kept);
//   - the newest task, whatever its state and age, and the sequence
//     numbers: each pass's pruned event is numbered above every event it
//     removed, so no seq of a task or an event is ever given twice (SQLite
//     numbers a new row one above the highest remaining one);
//   - the counters: a pruned task leaves its state's tally and is counted
//     in pruned:STATE:KIND (Metrics.Pruned, and its kind's in
//     Metrics.ByKind), so the depths and the tasks pruned still account
//     for every task submitted, and CheckCounters holds; its events'
//     counts, by kind too, outlive them;
//   - a tombstone of each pruned task's (user, key, request hash, task),
//     for the window the prune is given, so that a replayed submit still
//     returns the original task ID marked replay and a changed request
//     under the key is still refused; a later prune removes the tombstones
//     whose window has passed;
//   - the audit trail's record of itself: each transaction that removed
//     something appends a pruned event with its counts and actor.
//
// The schema enforces the first rule whatever runs the DELETE (migrations
// 0006 and PostgreSQL's 0002). Event cursors (EventsAfter, events
// --follow, SSE) read sequence numbers above the cursor: a follower behind
// a pruned range gets the events that remain, in order, and the pruned
// event that says what went.

// PruneBatchMax bounds the tasks one prune transaction removes, and the
// tombstones it expires.
const PruneBatchMax = 500

// pruneScanFactor bounds the tasks one pass reads: this many per task it
// may remove (old tasks kept in review, or for an effect without its
// receipt, are read and passed over).
const pruneScanFactor = 8

// PruneKeptListed is how many of the tasks a dry run keeps it names.
const PruneKeptListed = model.PruneKeptListed

// RetentionMax bounds every retention duration: an age or a window of more
// than ten years is a mistake, not a policy.
const RetentionMax = 3650 * 24 * time.Hour

// DefaultKeepKeys is how long a pruned task's idempotency tombstone is kept
// when a prune names no window.
const DefaultKeepKeys = 30 * 24 * time.Hour

// tallyCompactRows is the size above which PostgreSQL's tally_deltas is
// folded, and the rows one fold takes.
const tallyCompactRows = 10000

// PruneRequest asks for a prune.
type PruneRequest struct {
	// OlderThan is the age: tasks settled at or before now minus it go.
	OlderThan time.Duration
	// KeepKeys is how long the tombstones of the tasks pruned are kept
	// (zero: DefaultKeepKeys).
	KeepKeys time.Duration
	// Batch bounds the tasks each transaction removes (zero:
	// PruneBatchMax, which also bounds it).
	Batch int
	// DryRun counts what would go and changes nothing.
	DryRun bool
	Actor  string
}

// Check reports what Prune would refuse in r, naming the field, and
// changes nothing.
func (r PruneRequest) Check() error { return r.validate() }

// validate checks r and fills its defaults.
func (r *PruneRequest) validate() error {
	if err := model.CheckName("actor", r.Actor); err != nil {
		return err
	}
	if err := checkAge("older_than", r.OlderThan, false); err != nil {
		return err
	}
	if r.KeepKeys == 0 {
		r.KeepKeys = DefaultKeepKeys
	}
	if err := checkAge("keep_keys", r.KeepKeys, false); err != nil {
		return err
	}
	if r.Batch == 0 {
		r.Batch = PruneBatchMax
	}
	if r.Batch < 1 || r.Batch > PruneBatchMax {
		return &model.ValidationError{Field: "batch", Problem: fmt.Sprintf("must be between 1 and %d, got %d", PruneBatchMax, r.Batch)}
	}
	return nil
}

// checkAge refuses a retention duration that is negative, zero (unless
// zeroOK), finer than a millisecond or longer than RetentionMax.
func checkAge(field string, d time.Duration, zeroOK bool) error {
	switch {
	case d < 0:
		return &model.ValidationError{Field: field, Problem: "must not be negative, got " + FormatAge(d)}
	case d == 0 && !zeroOK:
		return &model.ValidationError{Field: field, Problem: "must be positive, got 0"}
	case d%time.Millisecond != 0:
		return &model.ValidationError{Field: field, Problem: "must be whole milliseconds, got " + d.String()}
	case d > RetentionMax:
		return &model.ValidationError{Field: field, Problem: "must be at most " + FormatAge(RetentionMax) + ", got " + FormatAge(d)}
	}
	return nil
}

// PruneResult is what a prune removed (a dry run: would remove): the
// reference model's counts, one type for both (see model.PruneCounts).
type PruneResult = model.PruneCounts

func newPruneResult(cutoff time.Time, dry bool) PruneResult {
	return PruneResult{DryRun: dry, Cutoff: cutoff, Tasks: map[model.State]int64{}}
}

// Prune removes every terminal task settled at least r.OlderThan ago (at
// the queue's clock when it starts) that it may, with its events and
// effects, leaving tombstones of their keys, and removes the tombstones
// whose window has passed: in transactions of at most r.Batch tasks, each
// recorded by a pruned event. A storage error ends it and is returned with
// the counts of the transactions committed before it; so does ctx ending
// between two transactions. With r.DryRun it counts what would go, in one
// read, and changes nothing.
func (q *Queue) Prune(ctx context.Context, r PruneRequest) (PruneResult, error) {
	if err := r.validate(); err != nil {
		return PruneResult{}, err
	}
	cutoff := model.Truncate(q.now().Add(-r.OlderThan))
	if r.DryRun {
		return q.pruneCount(ctx, cutoff)
	}
	total := newPruneResult(cutoff, false)
	p := prunePass{cutoff: cutoff, olderThan: r.OlderThan, keepKeys: r.KeepKeys, batch: r.Batch, actor: r.Actor}
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("queue: prune: %w", err)
		}
		out, err := q.prunePass(ctx, p)
		if err != nil {
			return total, err
		}
		total.Add(out.res)
		if out.done && out.res.Expired < int64(p.batch) {
			return total, nil
		}
		// Past the tasks read, even when the pass reached the end and runs
		// again only to expire more tombstones: a rescan would count the
		// tasks it keeps again.
		p.after = out.next
	}
}

// pruneCount is the dry run: what a prune at cutoff would remove, read in
// one read transaction.
func (q *Queue) pruneCount(ctx context.Context, cutoff time.Time) (PruneResult, error) {
	res := newPruneResult(cutoff, true)
	if err := q.checkOpen("prune"); err != nil {
		return res, err
	}
	tx, err := q.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return res, fmt.Errorf("queue: prune: begin: %w", err)
	}
	t := &txn{q: q, ctx: ctx, tx: tx, now: q.now()}
	defer q.prepareLater(ctx, t)
	defer tx.Rollback()
	at := sql.Named("cutoff", model.Millis(cutoff))
	rows, err := t.query(qPruneCountTasks, at)
	if err != nil {
		return res, fmt.Errorf("queue: prune: %w", err)
	}
	for rows.Next() {
		var state string
		var n int64
		if err := rows.Scan(&state, &n); err != nil {
			rows.Close()
			return res, fmt.Errorf("queue: prune: %w", err)
		}
		res.Tasks[model.State(state)] = n
	}
	if err := rows.Close(); err != nil {
		return res, fmt.Errorf("queue: prune: %w", err)
	}
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("queue: prune: %w", err)
	}
	if err := t.queryRow(qPruneCountRest, at, sql.Named("now", model.Millis(t.now))).
		Scan(&res.Events, &res.Effects, &res.Kept, &res.Expired); err != nil {
		return res, fmt.Errorf("queue: prune: %w", err)
	}
	res.Tombstones = res.TaskCount()
	if res.Kept == 0 {
		return res, nil
	}
	rows, err = t.query(qPruneKept, at, sql.Named("limit", PruneKeptListed))
	if err != nil {
		return res, fmt.Errorf("queue: prune: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return res, fmt.Errorf("queue: prune: %w", err)
		}
		res.KeptIDs = append(res.KeptIDs, id)
	}
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("queue: prune: %w", err)
	}
	return res, nil
}

// prunePass is one prune transaction's brief.
type prunePass struct {
	cutoff    time.Time
	olderThan time.Duration
	keepKeys  time.Duration
	batch     int
	after     int64 // the submission-order cursor: tasks with seq above it are read
	actor     string
}

// passOutcome is what one pass did and where the next one starts.
type passOutcome struct {
	res  PruneResult
	next int64 // the next pass's cursor, when not done
	done bool  // no task after the cursor can go at this cutoff
}

// prunePass runs one pass in a write transaction of its own.
func (q *Queue) prunePass(ctx context.Context, p prunePass) (passOutcome, error) {
	var out passOutcome
	err := q.writeRetrying(ctx, "prune", func(t *txn) error {
		var err error
		out, err = t.prune(p)
		return err
	})
	return out, err
}

// prune is one pass: it opens the schema's gate at the cutoff, reads the
// tasks after the cursor until it has a batch, takes them (again checked,
// the newest task never; on PostgreSQL locked, skipping those another
// prune holds), writes their tombstones, removes their effects, events and
// rows, expires tombstones, closes the gate and records what it did in an
// event numbered above every event there was before the pass, so that no
// sequence number is ever given twice (see prune.sql).
func (t *txn) prune(p prunePass) (passOutcome, error) {
	out := passOutcome{res: newPruneResult(p.cutoff, false)}
	cutoff := sql.Named("cutoff", model.Millis(p.cutoff))
	if _, err := t.exec(qPruneGateOpen, cutoff); err != nil {
		return out, err
	}
	var top int64
	if err := t.queryRow(qPruneEventsTop).Scan(&top); err != nil {
		return out, fmt.Errorf("queue: prune: %w", err)
	}
	ids, err := t.pruneScan(p, &out)
	if err != nil {
		return out, err
	}
	if len(ids) > 0 {
		if err := t.pruneTake(ids, p, &out); err != nil {
			return out, err
		}
	}
	expired, err := t.exec(qPruneExpire, sql.Named("now", model.Millis(t.now)), sql.Named("limit", p.batch))
	if err != nil {
		return out, err
	}
	out.res.Expired = expired
	if _, err := t.exec(qPruneGateClose); err != nil {
		return out, err
	}
	if !out.res.Changed() {
		return out, nil
	}
	out.res.Transactions = 1
	if err := t.compactTallies(); err != nil {
		return out, err
	}
	_, err = t.exec(qPruneEventInsert, sql.Named("top", top),
		sql.Named("task_id", ""), sql.Named("kind", string(model.EventPruned)),
		sql.Named("attempt", 0), sql.Named("fence", 0), sql.Named("op_id", ""),
		sql.Named("from_state", ""), sql.Named("to_state", ""), sql.Named("reason", ""),
		sql.Named("actor", p.actor), sql.Named("at", model.Millis(t.now)),
		sql.Named("detail", model.DetailPruned(p.olderThan, out.res)), sql.Named("scope", model.ScopeOf(t.ctx)))
	return out, err
}

// pruneScan reads tasks in submission order after the pass's cursor and
// returns the IDs of up to a batch that may go, counting the ones kept for
// an effect without its receipt. It stops at the first task created after
// the cutoff: a task cannot settle before it was created, so none after it
// can go (but for a clock skew between machines, which only delays them).
func (t *txn) pruneScan(p prunePass, out *passOutcome) ([]string, error) {
	limit := p.batch * pruneScanFactor
	rows, err := t.query(qPruneScan, sql.Named("after", p.after), sql.Named("limit", limit))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cutoff := model.Millis(p.cutoff)
	var ids []string
	read, last := 0, p.after
	for rows.Next() {
		var seq, created, updated, open int64
		var id, state string
		if err := rows.Scan(&seq, &id, &state, &created, &updated, &open); err != nil {
			return nil, fmt.Errorf("queue: prune: scan: %w", err)
		}
		read++
		last = seq
		if created > cutoff {
			out.done = true
			break
		}
		if !model.State(state).Terminal() || updated > cutoff {
			continue
		}
		if open > 0 {
			out.res.Kept++
			continue
		}
		ids = append(ids, id)
		if len(ids) == p.batch {
			break
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("queue: prune: scan: %w", err)
	}
	if !out.done && len(ids) < p.batch && read < limit {
		out.done = true
	}
	out.next = last
	return ids, nil
}

// pruneTake removes the batch ids: it takes them (the ones still eligible,
// locked where the store locks rows), then writes their tombstones and
// deletes their effects, events and rows.
func (t *txn) pruneTake(ids []string, p prunePass, out *passOutcome) error {
	cutoff := sql.Named("cutoff", model.Millis(p.cutoff))
	list, err := idsArg(ids)
	if err != nil {
		return err
	}
	rows, err := t.query(qPruneTake, sql.Named("ids", list), cutoff)
	if err != nil {
		return err
	}
	var taken []string
	states := map[model.State]int64{}
	for rows.Next() {
		var id, state string
		if err := rows.Scan(&id, &state); err != nil {
			rows.Close()
			return fmt.Errorf("queue: prune: take: %w", err)
		}
		taken = append(taken, id)
		states[model.State(state)]++
	}
	if err := rows.Close(); err != nil {
		return fmt.Errorf("queue: prune: take: %w", err)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("queue: prune: take: %w", err)
	}
	if len(taken) == 0 {
		return nil
	}
	if list, err = idsArg(taken); err != nil {
		return err
	}
	batch := sql.Named("ids", list)
	now := model.Millis(t.now)
	if out.res.Tombstones, err = t.exec(qPruneTombstones, batch, sql.Named("now", now),
		sql.Named("expires_at", now+p.keepKeys.Milliseconds())); err != nil {
		return err
	}
	if out.res.Effects, err = t.exec(qPruneEffects, batch); err != nil {
		return err
	}
	if out.res.Events, err = t.exec(qPruneEvents, batch); err != nil {
		return err
	}
	removed, err := t.exec(qPruneTasks, batch)
	if err != nil {
		return err
	}
	if removed != int64(len(taken)) || out.res.Tombstones != removed {
		return fmt.Errorf("queue: prune: took %d tasks, removed %d, wrote %d tombstones", len(taken), removed, out.res.Tombstones)
	}
	out.res.Tasks = states
	return nil
}

// idsArg is a batch of task IDs as the prune statements take it: a JSON
// array.
func idsArg(ids []string) (string, error) {
	b, err := json.Marshal(ids)
	if err != nil {
		return "", fmt.Errorf("queue: prune: ids: %w", err)
	}
	return string(b), nil
}

// compactTallies folds the oldest rows of a store whose counters are rows
// of changes (PostgreSQL's tally_deltas, which gains rows with every state
// change and every prune) once it holds more than tallyCompactRows; a
// store without such a table (SQLite's tallies are one row per name) has
// no tally_compact query and nothing to do.
func (t *txn) compactTallies() error {
	if !t.q.store.Capabilities().CounterRows {
		return nil
	}
	limit := sql.Named("limit", tallyCompactRows)
	var rows int64
	if err := t.queryRow(qTallyRows, limit).Scan(&rows); err != nil {
		return fmt.Errorf("queue: compact tallies: %w", err)
	}
	if rows <= tallyCompactRows {
		return nil
	}
	_, err := t.exec(qTallyCompact, limit)
	return err
}

// RetentionPolicy is the stored housekeeping policy: what every worker's
// housekeeping prunes (PruneDue). It lives in the database, so every
// process on every machine applies the same one.
type RetentionPolicy struct {
	// OlderThan is the age past which terminal tasks are pruned; zero
	// turns housekeeping's pruning off (the default).
	OlderThan time.Duration
	// KeepKeys is how long the tombstones of pruned tasks are kept.
	KeepKeys time.Duration
}

// Validate checks a policy: OlderThan zero (off) or a valid age, KeepKeys
// a valid window.
func (p RetentionPolicy) Validate() error {
	if err := checkAge("older_than", p.OlderThan, true); err != nil {
		return err
	}
	return checkAge("keep_keys", p.KeepKeys, false)
}

// String is the policy as the audit trail and the command line print it.
func (p RetentionPolicy) String() string {
	if p.OlderThan == 0 {
		return "off keep_keys=" + FormatAge(p.KeepKeys)
	}
	return "older_than=" + FormatAge(p.OlderThan) + " keep_keys=" + FormatAge(p.KeepKeys)
}

const (
	settingPruneOlderThan = "prune_older_than_ms"
	settingPruneKeepKeys  = "prune_keep_keys_ms"
)

// readRetention reads the policy from the rows of settings_all.
func readRetention(rows *sql.Rows) (RetentionPolicy, error) {
	defer rows.Close()
	var p RetentionPolicy
	found := 0
	for rows.Next() {
		var key string
		var value int64
		if err := rows.Scan(&key, &value); err != nil {
			return p, fmt.Errorf("queue: read retention: %w", err)
		}
		switch key {
		case settingPruneOlderThan:
			p.OlderThan = time.Duration(value) * time.Millisecond
			found++
		case settingPruneKeepKeys:
			p.KeepKeys = time.Duration(value) * time.Millisecond
			found++
		}
	}
	if err := rows.Err(); err != nil {
		return p, fmt.Errorf("queue: read retention: %w", err)
	}
	if found != 2 {
		return p, fmt.Errorf("queue: read retention: settings lack %s or %s", settingPruneOlderThan, settingPruneKeepKeys)
	}
	return p, nil
}

// Retention returns the stored retention policy.
func (q *Queue) Retention(ctx context.Context) (RetentionPolicy, error) {
	rows, err := q.readRows(ctx, qSettingsAll)
	if err != nil {
		return RetentionPolicy{}, err
	}
	return readRetention(rows)
}

// SetRetention stores the retention policy every worker's housekeeping
// applies, and records the change in the audit trail.
func (q *Queue) SetRetention(ctx context.Context, p RetentionPolicy, actor string) error {
	if err := model.CheckName("actor", actor); err != nil {
		return err
	}
	if err := p.Validate(); err != nil {
		return err
	}
	return q.write(ctx, "set retention", func(t *txn) error {
		if err := t.execOne(qSettingSet, sql.Named("key", settingPruneOlderThan),
			sql.Named("value", p.OlderThan.Milliseconds())); err != nil {
			return err
		}
		if err := t.execOne(qSettingSet, sql.Named("key", settingPruneKeepKeys),
			sql.Named("value", p.KeepKeys.Milliseconds())); err != nil {
			return err
		}
		return t.emit(model.Event{Kind: model.EventRetentionSet, Actor: actor, Detail: p.String()})
	})
}

// HousekeepingActor is the actor the audit trail records for the prunes
// housekeeping runs.
const HousekeepingActor = "housekeeping"

// pruneCursor is where this process's housekeeping passes resume.
type pruneCursor struct {
	mu    sync.Mutex
	after int64
}

// PruneDue is the housekeeping step of retention: with a stored policy
// (Retention) it runs one prune pass, of at most PruneBatchMax tasks, from
// where this queue's previous PruneDue left off, back to the start once a
// pass reaches the end; a pass with nothing to remove is a read and writes
// nothing. With no policy it costs one read. Either way, on a store whose
// counters are rows of changes, it folds them once there are many.
func (q *Queue) PruneDue(ctx context.Context) (PruneResult, error) {
	policy, err := q.Retention(ctx)
	if err != nil {
		return PruneResult{}, err
	}
	if policy.OlderThan == 0 {
		return PruneResult{}, q.compactDue(ctx)
	}
	q.prunes.mu.Lock()
	defer q.prunes.mu.Unlock()
	cutoff := model.Truncate(q.now().Add(-policy.OlderThan))
	pass := prunePass{cutoff: cutoff, olderThan: policy.OlderThan, keepKeys: policy.KeepKeys,
		batch: PruneBatchMax, after: q.prunes.after, actor: HousekeepingActor}
	out, idle, err := q.pruneLook(ctx, pass)
	if err != nil {
		return PruneResult{}, err
	}
	if idle {
		if err := q.compactDue(ctx); err != nil {
			return PruneResult{}, err
		}
	} else if out, err = q.prunePass(ctx, pass); err != nil {
		return PruneResult{}, err
	}
	q.prunes.after = out.next
	if out.done {
		q.prunes.after = 0
	}
	return out.res, nil
}

// pruneLook reads, without a write transaction, what the pass p would
// find: idle when it would remove no task and expire no tombstone, so that
// housekeeping with nothing to prune writes nothing (a SQLite write
// transaction would take the write lock and sync the log). The outcome
// carries the scan's cursor, for an idle pass to move on.
func (q *Queue) pruneLook(ctx context.Context, p prunePass) (passOutcome, bool, error) {
	out := passOutcome{res: newPruneResult(p.cutoff, false)}
	if err := q.checkOpen("prune"); err != nil {
		return out, false, err
	}
	tx, err := q.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return out, false, fmt.Errorf("queue: prune: begin: %w", err)
	}
	t := &txn{q: q, ctx: ctx, tx: tx, now: q.now()}
	defer q.prepareLater(ctx, t)
	defer tx.Rollback()
	ids, err := t.pruneScan(p, &out)
	if err != nil {
		return out, false, err
	}
	var expired bool
	if err := t.queryRow(qPruneExpiredAny, sql.Named("now", model.Millis(t.now))).Scan(&expired); err != nil {
		return out, false, fmt.Errorf("queue: prune: %w", err)
	}
	return out, len(ids) == 0 && !expired, nil
}

// compactDue folds a store's rows of counter changes when there are many
// (see compactTallies), in a transaction of its own.
func (q *Queue) compactDue(ctx context.Context) error {
	if !q.store.Capabilities().CounterRows {
		return nil
	}
	return q.write(ctx, "compact tallies", func(t *txn) error { return t.compactTallies() })
}

// ParseAge reads a retention duration: a Go duration (36h, 90m) or a whole
// number of days (30d).
func ParseAge(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil || days == "" || strings.HasPrefix(days, "+") {
			return 0, fmt.Errorf("%q is not a number of days (such as 30d) or a duration (such as 36h)", s)
		}
		if n > int64(RetentionMax/(24*time.Hour)) || n < -int64(RetentionMax/(24*time.Hour)) {
			return 0, fmt.Errorf("%q is more than %s", s, FormatAge(RetentionMax))
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number of days (such as 30d) or a duration (such as 36h)", s)
	}
	return d, nil
}

// FormatAge prints a retention duration as ParseAge reads it: whole days
// as 30d, anything else as a Go duration (model.FormatAge).
func FormatAge(d time.Duration) string { return model.FormatAge(d) }

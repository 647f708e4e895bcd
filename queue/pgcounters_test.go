package queue

import (
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// tallies reads every counter as tallies_all sums it.
func (f *pgFixture) tallies() map[string][2]int64 {
	f.t.Helper()
	out := map[string][2]int64{}
	rows := f.query("tallies_all")
	defer rows.Close()
	for rows.Next() {
		var name string
		var n, sum int64
		require.NoError(f.t, rows.Scan(&name, &n, &sum))
		out[name] = [2]int64{n, sum}
	}
	require.NoError(f.t, rows.Err())
	return out
}

// rowCount counts a table's rows.
func (f *pgFixture) rowCount(table string) int {
	f.t.Helper()
	var n int
	require.NoError(f.t, f.db.QueryRowContext(f.ctx, "SELECT COUNT(*) FROM "+table).Scan(&n))
	return n
}

// TestPostgresCountersPerStatement: pre-fold version 4's triggers count a
// statement's rows once, by name and by user, with the sums the row
// triggers made: a claim of several tasks of two users, a settle of
// several at once in both directions (whose changes to running cancel),
// a batch of events, and updates that change no state, which count
// nothing.
func TestPostgresCountersPerStatement(t *testing.T) {
	f := freshPostgres(t)
	for _, id := range []string{"a1", "a2", "a3"} {
		f.insertTask(id, "alice", 1000)
	}
	for _, id := range []string{"b1", "b2"} {
		f.insertTask(id, "bob", 1000)
	}
	deltasBefore := f.rowCount("tally_deltas")

	var seqs []int64
	rows, err := f.db.QueryContext(f.ctx, "SELECT seq FROM tasks WHERE id IN ('a1', 'a2', 'b1') ORDER BY seq")
	require.NoError(t, err)
	for rows.Next() {
		var s int64
		require.NoError(t, rows.Scan(&s))
		seqs = append(seqs, s)
	}
	require.NoError(t, rows.Err())
	require.EqualValues(t, 3, f.take(seqs, "w1", 9000, 1040))
	// One row per name the claim changed: state:queued, state:running and
	// queue_wait:1 (all three waited 40 ms).
	require.Equal(t, deltasBefore+3, f.rowCount("tally_deltas"), "a claim of three adds a row per name, not per task")
	got := f.tallies()
	require.Equal(t, [2]int64{2, 0}, got["state:queued"])
	require.Equal(t, [2]int64{3, 0}, got["state:running"])
	require.Equal(t, [2]int64{3, 120}, got["queue_wait:1"], "three waits of 40 ms")

	// One statement requeues a1 and claims a3 (alice's running count
	// does not move), and completes b1.
	_, err = f.db.ExecContext(f.ctx, `UPDATE tasks SET
	    state = CASE id WHEN 'a1' THEN 'queued' WHEN 'a3' THEN 'running' ELSE 'completed' END,
	    owner = CASE id WHEN 'a3' THEN 'w2' ELSE '' END,
	    lease_until = CASE id WHEN 'a3' THEN 9000 ELSE 0 END,
	    claimed_at = CASE id WHEN 'a3' THEN 1500 ELSE claimed_at END,
	    version = version + 1, updated_at = 1500
	WHERE id IN ('a1', 'a3', 'b1')`)
	require.NoError(t, err)
	got = f.tallies()
	require.Equal(t, [2]int64{2, 0}, got["state:queued"], "a1 back, a3 out")
	require.Equal(t, [2]int64{2, 0}, got["state:running"], "a2 and a3")
	require.Equal(t, [2]int64{1, 0}, got["state:completed"])
	require.Equal(t, [2]int64{1, 500}, got["queue_wait:4"], "a3 waited 500 ms")
	require.Equal(t, [2]int64{2, 920}, got["run_time:4"], "a1 and b1 ran 460 ms each")

	// Updates that change no state count nothing, and add no rows.
	deltasBefore, userRows := f.rowCount("tally_deltas"), f.rowCount("user_deltas")
	_, err = f.db.ExecContext(f.ctx, "UPDATE tasks SET updated_at = updated_at + 1")
	require.NoError(t, err)
	_, err = f.db.ExecContext(f.ctx, "UPDATE tasks SET updated_at = 0 WHERE id = 'nobody'")
	require.NoError(t, err)
	require.Equal(t, deltasBefore, f.rowCount("tally_deltas"))
	require.Equal(t, userRows, f.rowCount("user_deltas"))

	// A batch of events is counted by kind and transition, a row each,
	// and by its tasks' kind as well, a row each.
	f.exec("event_insert_batch", sql.Named("events", `[
	  ["a1","claimed",1,1,"","queued","running","","w1",1040,"",""],
	  ["a2","claimed",1,1,"","queued","running","","w1",1040,"",""],
	  ["b1","completed",1,2,"","running","completed","","w1",1500,"",""]]`))
	require.Equal(t, deltasBefore+4, f.rowCount("tally_deltas"))
	got = f.tallies()
	require.Equal(t, [2]int64{2, 0}, got["event:claimed:queued:running:"])
	require.Equal(t, [2]int64{1, 0}, got["event:completed:running:completed:"])
	require.Equal(t, [2]int64{2, 0}, got["kind:synthetic:claimed:queued:running:"])
	require.Equal(t, [2]int64{1, 0}, got["kind:synthetic:completed:running:completed:"])

	var states, users, over int
	require.NoError(t, f.queryRow("counters_check").Scan(&states, &users, &over))
	require.Equal(t, [3]int{0, 0, 0}, [3]int{states, users, over}, "the counters agree with the tasks")
	var active int64
	require.NoError(t, f.queryRow("active_total").Scan(&active))
	require.EqualValues(t, 4, active, "a1, a2, a3 and b2")
}

// TestPostgresFusedGroupCountsItself: complete_and_claim
// skips the counting triggers and adds what they would have, once for the
// whole statement: two completions of two users and a claim of the next
// task leave one row a counter name (state:running nets to one fewer), and
// the completions' users' counts lowered. The setting that skips the
// triggers ends with the statement: the same session's next UPDATE is
// counted by them, and the counters agree with the tasks.
func TestPostgresFusedGroupCountsItself(t *testing.T) {
	f := freshPostgres(t)
	f.insertTask("a1", "alice", 1000)
	f.insertTask("b1", "bob", 1000)
	f.insertTask("a2", "alice", 1000)
	seqs := map[string]int64{}
	rows, err := f.db.QueryContext(f.ctx, "SELECT id, seq FROM tasks")
	require.NoError(t, err)
	for rows.Next() {
		var id string
		var s int64
		require.NoError(t, rows.Scan(&id, &s))
		seqs[id] = s
	}
	require.NoError(t, rows.Err())
	require.EqualValues(t, 2, f.take([]int64{seqs["a1"], seqs["b1"]}, "w1", 9000, 1040))
	before := f.tallies()
	deltasBefore := f.rowCount("tally_deltas")

	conn, err := f.db.Conn(f.ctx)
	require.NoError(t, err)
	defer conn.Close()
	text, bound := f.args("complete_and_claim", sql.Named("kinds", ""),
		sql.Named("claims", `[["a1",1,1500],["b1",1,1700]]`),
		sql.Named("events", `[
		  ["a1","completed",1,1,"","running","completed","","w1",1500,"",""],
		  ["b1","completed",1,1,"","running","completed","","w1",1700,"",""]]`),
		sql.Named("now", int64(1800)), sql.Named("due", int64(1800)), sql.Named("alive", int64(1800)),
		sql.Named("max", 1), sql.Named("owner", "w2"), sql.Named("lease_until", int64(9800)),
		sql.Named("user_limits", true), sql.Named("at_lease_until", false), sql.Named("scope", ""))
	taken, err := conn.QueryContext(f.ctx, text, bound...)
	require.NoError(t, err)
	tasks, err := scanTasks(taken)
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	require.Equal(t, "a2", tasks[0].ID)

	// state:queued, state:running, state:completed, run_time:4 (460 ms),
	// run_time:5 (660 ms), queue_wait:5 (800 ms), and the two event names
	// counted by the function; the same two by the tasks' kind, counted by
	// events_counted_by_kind, which fires for every statement: ten rows.
	require.Equal(t, deltasBefore+10, f.rowCount("tally_deltas"), "one row a name for the whole statement")
	got := f.tallies()
	diff := func(name string) [2]int64 {
		return [2]int64{got[name][0] - before[name][0], got[name][1] - before[name][1]}
	}
	require.Equal(t, [2]int64{-1, 0}, diff("state:queued"))
	require.Equal(t, [2]int64{-1, 0}, diff("state:running"), "two completed, one claimed")
	require.Equal(t, [2]int64{2, 0}, diff("state:completed"))
	require.Equal(t, [2]int64{1, 460}, diff("run_time:4"))
	require.Equal(t, [2]int64{1, 660}, diff("run_time:5"))
	require.Equal(t, [2]int64{1, 800}, diff("queue_wait:5"))
	require.Equal(t, [2]int64{2, 0}, diff("event:completed:running:completed:"))
	require.Equal(t, [2]int64{1, 0}, diff("event:claimed:queued:running:"))
	require.Equal(t, [2]int64{2, 0}, diff("kind:synthetic:completed:running:completed:"))
	require.Equal(t, [2]int64{1, 0}, diff("kind:synthetic:claimed:queued:running:"))
	var states, users, over int
	require.NoError(t, f.queryRow("counters_check").Scan(&states, &users, &over))
	require.Equal(t, [3]int{0, 0, 0}, [3]int{states, users, over}, "the counters agree with the tasks")

	// The setting is gone with the statement: the session's next state
	// change is counted by the triggers.
	var counted sql.NullString
	require.NoError(t, conn.QueryRowContext(f.ctx, "SELECT current_setting('leasehold.counted', true)").Scan(&counted))
	require.NotEqual(t, "on", counted.String)
	_, err = conn.ExecContext(f.ctx, `UPDATE tasks SET state = 'queued', version = version, owner = '', lease_until = 0
	    WHERE id = 'a2'`)
	require.NoError(t, err)
	got = f.tallies()
	require.Equal(t, [2]int64{0, 0}, diff("state:queued"), "a2 is queued again")
	require.NoError(t, f.queryRow("counters_check").Scan(&states, &users, &over))
	require.Equal(t, [3]int{0, 0, 0}, [3]int{states, users, over}, "the triggers counted the hand-made change")
}

// TestPostgresSubmitsFoldUserDeltas: with nothing claimed, submits keep
// user_deltas bounded (pre-fold version 16): each adds a row, and a submit folds
// them into the users' rows once they span 256, by submit_one (a lone
// submit) and by user_ensure (the usual way) alike. The users' counts and
// the counters' check are what they would be without the fold, and a user
// whose row another transaction holds keeps its rows for that transaction.
func TestPostgresSubmitsFoldUserDeltas(t *testing.T) {
	f := freshPostgres(t)
	users := []string{"ana", "bob", "cy"}
	submit := func(q *Queue, from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			_, err := q.Submit(f.ctx, model.SubmitRequest{User: users[i%3], Key: fmt.Sprintf("k%d", i), Payload: `{}`,
				CostBudget: 1, StepsMax: 1})
			require.NoError(t, err)
		}
	}
	active := func(user string) int64 {
		t.Helper()
		var n int64
		require.NoError(t, f.db.QueryRowContext(f.ctx, "SELECT active FROM user_caps WHERE user_id = $1", user).Scan(&n))
		return n
	}
	deltas := func(user string) int {
		t.Helper()
		var n int
		require.NoError(t, f.db.QueryRowContext(f.ctx, "SELECT COUNT(*) FROM user_deltas WHERE user_id = $1", user).Scan(&n))
		return n
	}
	checked := func() {
		t.Helper()
		var states, users, over int
		require.NoError(t, f.queryRow("counters_check").Scan(&states, &users, &over))
		require.Equal(t, [3]int{0, 0, 0}, [3]int{states, users, over})
	}

	submit(f.q, 0, 600) // lone submits: submit_one
	require.Less(t, f.rowCount("user_deltas"), 256, "600 submits, folded")
	for _, u := range users {
		require.EqualValues(t, 200, active(u))
	}
	checked()

	// Bob's row is held (a claim would hold it so): the usual way's folds
	// pass it over, and bob's rows wait for whoever holds it.
	usual, err := Open(f.ctx, Options{Path: f.url, Clock: clockwork.NewFakeClockAt(time.UnixMilli(1000)),
		IDs: model.NewSeededIDs(2), Unfused: true})
	require.NoError(t, err)
	defer usual.Close()
	bobBefore := deltas("bob")
	tx, err := f.db.BeginTx(f.ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }() // a failed check must not leave bob's row held
	_, err = tx.ExecContext(f.ctx, "SELECT 1 FROM users WHERE user_id = 'bob' FOR NO KEY UPDATE")
	require.NoError(t, err)
	submit(usual, 600, 600)
	require.Equal(t, bobBefore+200, deltas("bob"), "bob's row is held: none of bob's rows is folded")
	require.Less(t, deltas("ana")+deltas("cy"), 256, "ana's and cy's are")
	require.NoError(t, tx.Rollback())
	for _, u := range users {
		require.EqualValues(t, 400, active(u))
	}
	checked()
	submit(usual, 1200, 300)
	require.Less(t, f.rowCount("user_deltas"), 256, "bob's row is free again: folded")
	for _, u := range users {
		require.EqualValues(t, 500, active(u))
	}
	checked()

	// A batch of 300 users' first tasks adds a row for each; the next
	// batch's users_ensure folds them.
	var batch []model.SubmitRequest
	for i := range 300 {
		batch = append(batch, model.SubmitRequest{User: fmt.Sprintf("m%03d", i), Key: "k", Payload: `{}`, CostBudget: 1, StepsMax: 1})
	}
	_, err = usual.SubmitMany(f.ctx, batch)
	require.NoError(t, err)
	require.GreaterOrEqual(t, f.rowCount("user_deltas"), 300)
	_, err = usual.SubmitMany(f.ctx, []model.SubmitRequest{{User: "ana", Key: "last", Payload: `{}`, CostBudget: 1, StepsMax: 1}})
	require.NoError(t, err)
	require.Less(t, f.rowCount("user_deltas"), 256, "SubmitMany folds too")
	require.EqualValues(t, 1, active("m042"))
	require.EqualValues(t, 501, active("ana"))
	checked()
}

// TestPostgresActiveCountReadsItsRowsByIndex: the queue's active count,
// which every submit reads (active_tasks), is read from the active states'
// rows of tally_deltas by their index (pre-fold version 20), however many rows
// of other names are waiting for housekeeping's compaction: before, it read
// the whole table, and intake slowed as those rows piled up. The count is
// still the number of queued and running tasks.
func TestPostgresActiveCountReadsItsRowsByIndex(t *testing.T) {
	f := freshPostgres(t)
	for i := range 30 {
		_, err := f.q.Submit(f.ctx, model.SubmitRequest{User: fmt.Sprintf("u%d", i%3), Key: fmt.Sprintf("k%d", i),
			Payload: `{}`, CostBudget: 1, StepsMax: 1})
		require.NoError(t, err)
	}
	claimed, err := f.q.Claim(f.ctx, model.ClaimRequest{Worker: "w", Max: 10, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, claimed, 10)
	for _, c := range claimed[:4] {
		require.NoError(t, f.q.Complete(f.ctx, c.Claim))
	}
	// Rows of other names, as fused groups and submits leave them between
	// compactions (n = 0 keeps every sum as it is).
	_, err = f.db.ExecContext(f.ctx, `INSERT INTO tally_deltas (name, n)
	    SELECT 'event:submitted::queued:', 0 FROM generate_series(1, 3000)`)
	require.NoError(t, err)

	tx, err := f.db.BeginTx(f.ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	// The scans of tally_deltas this connection has made and not yet
	// reported, before and after the call.
	scans := func() (seq, idx int64) {
		t.Helper()
		require.NoError(t, tx.QueryRowContext(f.ctx, `SELECT seq_scan, idx_scan FROM pg_stat_xact_user_tables
		    WHERE schemaname = current_schema() AND relname = 'tally_deltas'`).Scan(&seq, &idx))
		return seq, idx
	}
	seq0, idx0 := scans()
	var active int64
	require.NoError(t, tx.QueryRowContext(f.ctx, "SELECT active_tasks(256)").Scan(&active))
	require.EqualValues(t, 26, active, "30 submitted, 4 of them completed")
	seq1, idx1 := scans()
	require.Equal(t, seq0, seq1, "tally_deltas read whole")
	require.Greater(t, idx1, idx0, "tally_deltas read by tally_deltas_active")
	require.NoError(t, tx.Rollback())

	var states, users, over int
	require.NoError(t, f.queryRow("counters_check").Scan(&states, &users, &over))
	require.Equal(t, [3]int{0, 0, 0}, [3]int{states, users, over})
}

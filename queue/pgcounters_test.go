package queue

import (
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"
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

// TestPostgresCountersPerStatement: migration 0004's triggers count a
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

	// A batch of events is counted by kind and transition, a row each.
	f.exec("event_insert_batch", sql.Named("events", `[
	  ["a1","claimed",1,1,"","queued","running","","w1",1040,"",""],
	  ["a2","claimed",1,1,"","queued","running","","w1",1040,"",""],
	  ["b1","completed",1,2,"","running","completed","","w1",1500,"",""]]`))
	require.Equal(t, deltasBefore+2, f.rowCount("tally_deltas"))
	got = f.tallies()
	require.Equal(t, [2]int64{2, 0}, got["event:claimed:queued:running:"])
	require.Equal(t, [2]int64{1, 0}, got["event:completed:running:completed:"])

	var states, users, over int
	require.NoError(t, f.queryRow("counters_check").Scan(&states, &users, &over))
	require.Equal(t, [3]int{0, 0, 0}, [3]int{states, users, over}, "the counters agree with the tasks")
	var active int64
	require.NoError(t, f.queryRow("active_total").Scan(&active))
	require.EqualValues(t, 4, active, "a1, a2, a3 and b2")
}

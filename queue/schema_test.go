package queue

import (
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	sqlitestore "github.com/leasehold/leasehold/queue/internal/sqlite"
)

// pinnedMigrations holds the SHA-256 of every migration file. Committed
// migrations never change: a change to one fails this test, and a new one
// must be added here.
var pinnedMigrations = map[string]string{
	"0001_init.sql":               "41ebb14f7f7c18fb1e9ec3d9f917a9dd747c337ac262e86ddf5d431437cd23b9",
	"0002_hot_paths.sql":          "331809b20f48436ff5cc95bece2023843a90985554384eac5ccafa556fa82c65",
	"0003_audit.sql":              "3376454d2d3cfd6abb17b2d1b37cbc2a6b5be3231ac359e26442a9c979ff10c3",
	"0004_attempts_failed.sql":    "6dbfc66dd89e805d0ae80443379a06c93f4cbbfcfc6452f636ffe1515b580355",
	"0005_user_id.sql":            "815be5d4b32e4ad84e34de6f21a66a08ccd50a46de4dd571cd10d76e8308c4de",
	"0006_prune.sql":              "b54ad687312b8568feced52eee816c071bd3ea68a8c7de26b7ec4ac6054e074b",
	"0007_crossing.sql":           "32d0c4d032ffc27453fd92929101a545d8de3acb7fb46e5b871a1c791c5c0ef2",
	"0008_events_by_task_seq.sql": "271aa78af799a580b92dbb5b2f12a4bd55ad10050cd156119be3a4de9cf73e1a",
	"0009_kinds.sql":              "0779498864c3c14dce16c2961ba40d89c4b4eac267eeba36209ca7487d3c8a93",
	"0010_kind_tallies.sql":       "bc1a80de533ad0194e41cc410bf8ba3e29b2476c24a151746c6fa76cd3fca9e9",
}

func TestMigrationsArePinned(t *testing.T) {
	migrations, err := Migrations()
	require.NoError(t, err)
	require.NotEmpty(t, migrations)
	seen := map[string]bool{}
	for i, m := range migrations {
		require.Equal(t, i+1, m.Version)
		pinned, ok := pinnedMigrations[m.Name]
		require.True(t, ok, "migration %s is not pinned; add its checksum to pinnedMigrations", m.Name)
		body, err := fs.ReadFile(sqlitestore.Store{}.SQLFiles(), "migrations/"+m.Name)
		require.NoError(t, err)
		sum := sha256.Sum256(body)
		require.Equal(t, pinned, hex.EncodeToString(sum[:]), "committed migration %s changed", m.Name)
		require.Equal(t, pinned, m.Checksum)
		seen[m.Name] = true
	}
	for name := range pinnedMigrations {
		require.True(t, seen[name], "pinned migration %s is gone", name)
	}
	require.Equal(t, len(migrations), SchemaVersion())
}

// TestMigrationsReturnsACopy: the migrations are read once per process, and
// a caller that changes the list it got changes nobody else's.
func TestMigrationsReturnsACopy(t *testing.T) {
	first, err := Migrations()
	require.NoError(t, err)
	want := first[0]
	first[0].SQL, first[0].Checksum = "DROP TABLE tasks;", "forged"
	again, err := Migrations()
	require.NoError(t, err)
	require.Equal(t, want, again[0])
}

// checkList returns the quoted values of the CHECK (column IN (...)) list
// in a table's CREATE statement.
func checkList(t *testing.T, createSQL, column string) []string {
	t.Helper()
	re := regexp.MustCompile(`(?s)CHECK \(` + column + ` IN \(([^)]*)\)\)`)
	m := re.FindAllStringSubmatch(createSQL, -1)
	require.Len(t, m, 1, "one CHECK list for %s", column)
	var out []string
	for _, v := range regexp.MustCompile(`'([^']*)'`).FindAllStringSubmatch(m[0][1], -1) {
		out = append(out, v[1])
	}
	require.NotEmpty(t, out)
	return out
}

func tasksSQL(t *testing.T, b *bundle) string {
	t.Helper()
	var text string
	require.NoError(t, b.q.db.QueryRowContext(b.ctx,
		"SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'tasks'").Scan(&text))
	return text
}

func TestSchemaStatesMatchModel(t *testing.T) {
	b := setup(t)
	text := tasksSQL(t, b)
	var states []string
	for _, s := range model.States() {
		states = append(states, string(s))
	}
	require.Equal(t, states, checkList(t, text, "state"))

	reasons := []string{""}
	for _, r := range model.Reasons() {
		reasons = append(reasons, string(r))
	}
	require.Equal(t, reasons, checkList(t, text, "reason"))

	// tallies starts with a state:STATE row for every state.
	m := b.metrics()
	require.Len(t, m.Depth, len(model.States()))
	for _, s := range model.States() {
		_, ok := m.Depth[s]
		require.True(t, ok, "no count for %s", s)
	}

	// And the database enforces the lists.
	id := b.submit()
	_, err := b.q.db.ExecContext(b.ctx, "UPDATE tasks SET state = 'paused' WHERE id = ?", id)
	require.ErrorContains(t, err, "CHECK constraint failed")
	_, err = b.q.db.ExecContext(b.ctx, "UPDATE tasks SET reason = 'tired' WHERE id = ?", id)
	require.ErrorContains(t, err, "CHECK constraint failed")
	require.Equal(t, model.Queued, b.state(id))
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	b := setupFile(t)
	newer := SchemaVersion() + 1
	_, err := b.q.db.ExecContext(b.ctx,
		"INSERT INTO schema_migrations (version, name, checksum, applied_at) VALUES (?, ?, ?, ?)",
		newer, fmt.Sprintf("%04d_future.sql", newer), strings.Repeat("0", 64), model.Millis(b.now()))
	require.NoError(t, err)
	b.close()
	dump := func() string {
		db, err := sql.Open("sqlite", b.path)
		require.NoError(t, err)
		defer db.Close()
		return dumpDB(t, b.ctx, db)
	}
	before := dump()

	_, err = Open(b.ctx, Options{Path: b.path, Clock: b.clock, IDs: model.NewSeededIDs(2), Migrate: MigrateAll})
	require.ErrorIs(t, err, ErrSchemaTooNew)
	require.Contains(t, err.Error(), fmt.Sprintf("version %d", newer))
	require.Contains(t, err.Error(), fmt.Sprintf("up to %d", SchemaVersion()))
	require.Equal(t, before, dump(), "a refused database is not touched")
}

func TestOpenRefusesChangedMigration(t *testing.T) {
	b := setupFile(t)
	_, err := b.q.db.ExecContext(b.ctx, "UPDATE schema_migrations SET checksum = ? WHERE version = 1", strings.Repeat("f", 64))
	require.NoError(t, err)
	b.close()
	_, err = Open(b.ctx, Options{Path: b.path, Clock: b.clock, IDs: model.NewSeededIDs(2), Migrate: MigrateAll})
	require.ErrorIs(t, err, ErrSchemaMismatch)
	require.Contains(t, err.Error(), "0001_init.sql")
}

func TestOpenRefusesOlderSchemaUnlessMigrating(t *testing.T) {
	if SchemaVersion() < 2 {
		t.Skip("needs a second migration")
	}
	b := setupFile(t)
	_, err := b.q.db.ExecContext(b.ctx, "DELETE FROM schema_migrations WHERE version = ?", SchemaVersion())
	require.NoError(t, err)
	b.close()
	_, err = Open(b.ctx, Options{Path: b.path, Clock: b.clock, IDs: model.NewSeededIDs(2)})
	require.ErrorIs(t, err, ErrSchemaOutdated)
}

func TestReopenKeepsEverything(t *testing.T) {
	b := setupFile(t)
	id, c := b.running()
	_, err := b.q.CompleteStep(b.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 3})
	require.NoError(t, err)
	before, events := b.task(id), b.events("")
	b.close()
	again := b.reopen(2)
	require.Equal(t, before, again.task(id))
	require.Equal(t, events, again.events(""))
	require.NoError(t, again.q.Complete(again.ctx, c), "the claim survives a restart of the queue")
}

// queryPlan returns the steps of the plan SQLite chooses for the named
// query, bound to args.
func queryPlan(t *testing.T, b *bundle, name string, args ...any) []string {
	t.Helper()
	texts, err := queries()
	require.NoError(t, err)
	text, ok := texts[name]
	require.True(t, ok, "no query %s", name)
	rows, err := b.q.db.QueryContext(b.ctx, "EXPLAIN QUERY PLAN "+text, args...)
	require.NoError(t, err)
	defer rows.Close()
	var steps []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
		steps = append(steps, detail)
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, steps)
	return steps
}

// TestClaimQueryUsesIndex checks the plan of the claim query: a search on
// the claim index in claim order, with no temporary B-tree for sorting.
func TestClaimQueryUsesIndex(t *testing.T) {
	b := setupFile(t)
	for range 20 {
		b.submit(func(r *model.SubmitRequest) { r.Priority = int(b.keys % 3) })
	}
	steps := queryPlan(t, b, "claim_next", sql.Named("now", model.Millis(b.now())), sql.Named("limit", 8))
	plan := strings.Join(steps, " | ")
	require.Regexp(t, `^SEARCH tasks USING (COVERING )?INDEX tasks_claim\w* \(`, steps[0], "plan: %s", plan)
	require.NotContains(t, plan, "TEMP B-TREE", "plan: %s", plan)
	require.NotContains(t, plan, "SCAN tasks", "plan: %s", plan)
}

// TestClaimAnyReadsNoTaskNotDue checks the plan of an idle poll
// (claim_any): a descent of the claim index for each priority, and at
// each a search of its due tasks (priority and run_at both bound), never
// a scan of the queued tasks: read in claim order, a poll of a queue of
// 100,000 tasks due the next day read them all (11-19 ms a poll).
func TestClaimAnyReadsNoTaskNotDue(t *testing.T) {
	b := setupFile(t)
	for i := range 30 {
		b.submit(func(r *model.SubmitRequest) {
			r.Priority = i % 3
			r.RunAt = b.now().Add(time.Hour)
		})
	}
	steps := queryPlan(t, b, "claim_any", sql.Named("now", model.Millis(b.now())))
	plan := strings.Join(steps, " | ")
	require.Regexp(t, `SEARCH tasks (EXISTS )?USING (COVERING )?INDEX tasks_claim_queued \(blocked=\? AND priority=\? AND run_at<\?\)`,
		plan, "plan: %s", plan)
	require.NotContains(t, plan, "SCAN tasks", "plan: %s", plan)
	found, err := b.q.Claim(b.ctx, model.ClaimRequest{Worker: "w", Max: 1, Lease: time.Minute})
	require.NoError(t, err)
	require.Empty(t, found)
}

// TestAuditQueriesUseIndexes checks the plan of each form of the audit
// query: a search on the index of its filter, in seq order, with no
// temporary B-tree for sorting; the whole trail is read in primary-key
// order. It checks again after ANALYZE, whose statistics change the
// planner's estimates, over a trail of a few thousand events (on a tiny
// one a scan is cheapest).
func TestAuditQueriesUseIndexes(t *testing.T) {
	b := setup(t)
	for i := range 5 {
		id := b.submit()
		_, err := b.q.Cancel(b.ctx, id, fmt.Sprintf("caller%d", i%3))
		require.NoError(t, err)
	}
	_, err := b.q.db.ExecContext(b.ctx, `
		INSERT INTO events (task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope)
		WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000)
		SELECT 't_' || (i / 4), 'step', 1, 1, '', 'running', 'running', '', 'w' || (i % 7), ? + i * 1000, '', '' FROM n`,
		model.Millis(b.now()))
	require.NoError(t, err)
	b.clock.Advance(3000 * time.Second)
	now := model.Millis(b.now())
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			_, err := b.q.db.ExecContext(b.ctx, "ANALYZE")
			require.NoError(t, err)
		}
		for _, tc := range []struct {
			name  string
			args  []any
			first string // the first step of the plan
			index string // the index a step must search
		}{
			{"audit_by_task", []any{sql.Named("task_id", "t_x"), sql.Named("actor", "caller1")},
				`^SEARCH events USING INDEX events_task_seq \(task_seq=\?\)$`, "events_task_seq"},
			{"audit_by_actor", []any{sql.Named("actor", "caller1")},
				`^SEARCH events USING INDEX events_actor \(actor=\?\)$`, "events_actor"},
			{"audit_by_time", nil,
				`^SEARCH events USING INTEGER PRIMARY KEY \(rowid=\?\)$`, "COVERING INDEX events_at (at>? AND at<?)"},
			{"audit_all", nil, `^SCAN events$`, ""},
		} {
			args := append([]any{sql.Named("since", now-10_000), sql.Named("until", now), sql.Named("limit", 5)}, tc.args...)
			steps := queryPlan(t, b, tc.name, args...)
			plan := strings.Join(steps, " | ")
			require.Regexp(t, tc.first, steps[0], "%s (analyzed %v): %s", tc.name, analyzed, plan)
			require.Contains(t, plan, tc.index, "%s (analyzed %v)", tc.name, analyzed)
			require.NotContains(t, plan, "TEMP B-TREE", "%s (analyzed %v): %s", tc.name, analyzed, plan)
		}
	}
}

func TestEventsAreAppendOnly(t *testing.T) {
	b := setup(t)
	id, c := b.running()
	require.NoError(t, b.q.Complete(b.ctx, c))
	events := b.events("")
	require.NotEmpty(t, events)
	for _, stmt := range []string{
		"UPDATE events SET actor = 'mallory'",
		"UPDATE events SET detail = '' WHERE task_id = '" + id + "'",
		"DELETE FROM events",
		"DELETE FROM events WHERE seq = 1",
	} {
		_, err := b.q.db.ExecContext(b.ctx, stmt)
		require.ErrorContains(t, err, "events are append-only", stmt)
	}
	require.Equal(t, events, b.events(""))
}

func TestSchemaHasNoTimeDefaults(t *testing.T) {
	b := setup(t)
	rows, err := b.q.db.QueryContext(b.ctx, "SELECT name, sql FROM sqlite_schema WHERE sql IS NOT NULL")
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var name, text string
		require.NoError(t, rows.Scan(&name, &text))
		upper := strings.ToUpper(text)
		for _, banned := range []string{"CURRENT_TIMESTAMP", "CURRENT_TIME", "CURRENT_DATE", "DATETIME(", "STRFTIME(", "JULIANDAY(", "UNIXEPOCH("} {
			require.NotContains(t, upper, banned, "%s reads the database's clock", name)
		}
	}
	require.NoError(t, rows.Err())
}

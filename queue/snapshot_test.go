package queue

// Snapshots: CreateSnapshot copies a live file database while writers go
// on, VerifySnapshot refuses anything that is not exactly what its
// manifest describes (or that this build cannot trust), and Restore writes
// only a verified copy to a path where no database is. Corruption is made
// by hand: bytes flipped, files truncated, manifests swapped or rewritten,
// rows changed through raw SQL with the manifest resealed to match, so
// that each check is the one that catches it.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// snapshotSource returns a file queue holding a task in most states: three
// queued, one running, one waiting for approval, one in needs_review, one
// completed and one cancelled.
func snapshotSource(t *testing.T) *bundle {
	t.Helper()
	b := setupFile(t)
	b.running()
	b.waiting()
	b.parked()
	_, c := b.running()
	_, err := b.q.CompleteStep(b.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 1})
	require.NoError(t, err)
	require.NoError(t, b.q.Complete(b.ctx, c))
	cancelled := b.submit()
	_, err = b.q.Cancel(b.ctx, cancelled, "ops")
	require.NoError(t, err)
	for range 3 {
		b.submit()
	}
	return b
}

// takeSnapshot snapshots b's database to name in dir and returns its path.
func takeSnapshot(t *testing.T, b *bundle, dir, name string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	_, err := CreateSnapshot(b.ctx, b.path, out, b.clock.Now())
	require.NoError(t, err)
	return out
}

// dbState is what a manifest counts, in a comparable form.
type dbState struct {
	tasks, events int64
	states        string
}

func (s dbState) String() string {
	return fmt.Sprintf("%d tasks %s, %d events", s.tasks, s.states, s.events)
}

// readState counts db's tasks by state and its events.
func readState(ctx context.Context, db *sql.DB) (dbState, error) {
	var s dbState
	rows, err := db.QueryContext(ctx, "SELECT state, COUNT(*) FROM tasks GROUP BY state")
	if err != nil {
		return s, err
	}
	defer rows.Close()
	counts := map[string]int64{}
	for rows.Next() {
		var state string
		var n int64
		if err := rows.Scan(&state, &n); err != nil {
			return s, err
		}
		counts[state] = n
		s.tasks += n
	}
	if err := rows.Err(); err != nil {
		return s, err
	}
	s.states = fmt.Sprint(sortedCounts(counts))
	return s, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM events").Scan(&s.events)
}

func manifestState(m Manifest) dbState {
	return dbState{tasks: m.Tasks, events: m.Events, states: fmt.Sprint(sortedCounts(m.States))}
}

// fileSHA256 returns the hex SHA-256 of a file's contents.
func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// writeManifest writes m as path's manifest.
func writeManifest(t *testing.T, path string, m Manifest) {
	t.Helper()
	b, err := json.MarshalIndent(m, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(ManifestPath(path), b, 0o644))
}

// reseal rewrites path's manifest with the file's current checksum and
// size, then applies edit: what someone who tampered with the file and
// knew the format would do.
func reseal(t *testing.T, path string, edit func(*Manifest)) {
	t.Helper()
	m, err := ReadManifest(path)
	require.NoError(t, err)
	m.SHA256, m.Bytes, err = fileDigest(path)
	require.NoError(t, err)
	if edit != nil {
		edit(&m)
	}
	writeManifest(t, path, m)
}

// flipByte inverts the bits of the byte at offset.
func flipByte(t *testing.T, path string, offset int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Less(t, offset, int64(len(b)))
	b[offset] ^= 0xff
	require.NoError(t, os.WriteFile(path, b, 0o644))
}

// execRaw runs statements on a database file through a connection of its
// own, outside the queue.
func execRaw(t *testing.T, path string, statements ...string) {
	t.Helper()
	db, _, err := openRaw(path, false)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	conn, err := db.Conn(context.Background()) // PRAGMAs hold per connection
	require.NoError(t, err)
	defer conn.Close()
	for _, s := range statements {
		_, err := conn.ExecContext(context.Background(), s)
		require.NoError(t, err, s)
	}
}

// rootPage returns the page number of a table's b-tree root and the
// database's page size.
func rootPage(t *testing.T, path, table string) (int64, int64) {
	t.Helper()
	db, _, err := openRaw(path, true)
	require.NoError(t, err)
	defer db.Close()
	var root, size int64
	require.NoError(t, db.QueryRow("SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = ?", table).Scan(&root))
	require.NoError(t, db.QueryRow("PRAGMA page_size").Scan(&size))
	require.Greater(t, root, int64(1), "the table's root is a b-tree page after the schema page")
	return root, size
}

// requireRefused checks that err wraps sentinel and names every one of want.
func requireRefused(t *testing.T, err, sentinel error, want ...string) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, sentinel, "%v", err)
	for _, w := range want {
		require.Contains(t, err.Error(), w)
	}
}

// The snapshot of a database that workers go on writing is consistent: it
// verifies, and its counts are the source's counts after one of the
// writer's committed operations (never a state between two). A writer in
// the middle of a transaction neither blocks the copy nor leaks into it.
func TestCreateSnapshotWhileWritesContinue(t *testing.T) {
	b := snapshotSource(t)
	ctx := b.ctx
	dir := t.TempDir()
	initial, err := readState(ctx, b.q.db)
	require.NoError(t, err)

	// A writer cycles through submit, submit, claim, step, complete, one
	// commit each, and records the source's counts after every commit. It
	// is the only writer, so the recorded states are every state the
	// database passed through.
	const warmup, opsMax = 20, 5000
	var mu sync.Mutex
	seen := map[dbState]bool{initial: true}
	ops := 0
	warm, stop, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var writeErr error
	var held model.Claim
	op := func(i int) error {
		switch i % 5 {
		case 0, 1:
			_, err := b.q.Submit(ctx, model.SubmitRequest{User: "bo", Key: fmt.Sprintf("w%d", i),
				Payload: `{"steps":[{"cost":1}]}`, CostBudget: 10, StepsMax: 5})
			return err
		case 2:
			claimed, err := b.q.Claim(ctx, model.ClaimRequest{Worker: "w9", Max: 1, Lease: testLease})
			if err != nil || len(claimed) != 1 {
				return fmt.Errorf("claim: %d claimed, %v", len(claimed), err)
			}
			held = claimed[0].Claim
			return nil
		case 3:
			_, err := b.q.CompleteStep(ctx, model.StepWrite{Claim: held, Index: 0, Cost: 1})
			return err
		default:
			return b.q.Complete(ctx, held)
		}
	}
	go func() {
		defer close(done)
		for i := range opsMax {
			select {
			case <-stop:
				return
			default:
			}
			if err := op(i); err != nil {
				writeErr = fmt.Errorf("op %d: %w", i, err)
				return
			}
			st, err := readState(ctx, b.q.db)
			if err != nil {
				writeErr = err
				return
			}
			mu.Lock()
			seen[st] = true
			ops++
			mu.Unlock()
			if i == warmup {
				close(warm)
			}
		}
	}()
	select {
	case <-warm:
	case <-done:
		require.NoError(t, writeErr)
		require.FailNow(t, "the writer stopped before its warm-up")
	}
	out := filepath.Join(dir, "live.db")
	m, err := CreateSnapshot(ctx, b.path, out, b.clock.Now())
	close(stop)
	<-done
	require.NoError(t, err)
	require.NoError(t, writeErr)
	mu.Lock()
	t.Logf("the writer committed %d operations; the snapshot holds %s", ops, manifestState(m))
	require.True(t, seen[manifestState(m)], "the snapshot's counts (%s) are the source's after some commit", manifestState(m))
	mu.Unlock()
	v, err := VerifySnapshot(ctx, out)
	require.NoError(t, err)
	require.Equal(t, m, v.Manifest)
	require.NoError(t, b.q.CheckCounters(ctx), "the source is untouched by the copy")

	// A writer holds the write lock with a change not yet committed: the
	// copy does not wait for it and does not contain it.
	before, err := readState(ctx, b.q.db)
	require.NoError(t, err)
	raw, _, err := openRaw(b.path, false)
	require.NoError(t, err)
	defer raw.Close()
	conn, err := raw.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, "UPDATE tasks SET state = 'cancelled', reason = 'cancelled_by_caller', cancelled_by = 'ghost' WHERE state = 'queued'")
	require.NoError(t, err)
	mid := filepath.Join(dir, "mid-transaction.db")
	m, err = CreateSnapshot(ctx, b.path, mid, b.clock.Now())
	require.NoError(t, err, "the copy is a reader: a writer's lock does not block it")
	require.Equal(t, before, manifestState(m), "the uncommitted change is not in the copy")
	_, err = conn.ExecContext(ctx, "ROLLBACK")
	require.NoError(t, err)
	_, err = VerifySnapshot(ctx, mid)
	require.NoError(t, err)
}

// A fresh snapshot verifies, each check named; its manifest records the
// source's counts, this build's schema and the file's checksum.
func TestVerifySnapshotPassesAndListsItsChecks(t *testing.T) {
	b := snapshotSource(t)
	dir := t.TempDir()
	source, err := readState(b.ctx, b.q.db)
	require.NoError(t, err)
	out := takeSnapshot(t, b, dir, "fresh.db")

	m, err := ReadManifest(out)
	require.NoError(t, err)
	require.Equal(t, manifestFormat, m.Format)
	require.Equal(t, b.path, m.Source)
	require.Equal(t, b.clock.Now().UTC().Format(time.RFC3339Nano), m.CreatedAt)
	require.Equal(t, SchemaVersion(), m.SchemaVersion)
	require.Len(t, m.Migrations, SchemaVersion())
	require.Equal(t, source, manifestState(m))
	require.Equal(t, int64(8), m.Tasks)
	require.Equal(t, map[string]int64{"queued": 3, "running": 1, "waiting_for_approval": 1, "needs_review": 1,
		"completed": 1, "cancelled": 1}, m.States)
	require.Equal(t, fileSHA256(t, out), m.SHA256)
	st, err := os.Stat(out)
	require.NoError(t, err)
	require.Equal(t, st.Size(), m.Bytes)

	v, err := VerifySnapshot(b.ctx, out)
	require.NoError(t, err)
	require.Equal(t, m, v.Manifest)
	require.Len(t, v.Checks, 5)
	for i, prefix := range []string{"checksum:", "integrity:", "schema:", "invariants:", "counts:"} {
		require.True(t, strings.HasPrefix(v.Checks[i], prefix), "check %d is %q, want %s", i, v.Checks[i], prefix)
	}
	require.Contains(t, v.Checks[2], "version "+strconv.Itoa(SchemaVersion()))
	require.Contains(t, v.Checks[3], "all 8 tasks")
	require.Contains(t, v.Checks[4], "8 tasks")

	// Verifying reads only: the snapshot keeps its checksum and gains no
	// companion files.
	require.Equal(t, m.SHA256, fileSHA256(t, out))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	require.Equal(t, []string{"fresh.db", "fresh.db.manifest.json"}, names)

	// A snapshot never overwrites, and needs a source.
	_, err = CreateSnapshot(b.ctx, b.path, out, b.clock.Now())
	requireRefused(t, err, model.ErrInvalidInput, "exists")
	require.Equal(t, m.SHA256, fileSHA256(t, out))
	_, err = CreateSnapshot(b.ctx, filepath.Join(dir, "missing.db"), filepath.Join(dir, "other.db"), b.clock.Now())
	require.Error(t, err)
	require.NoFileExists(t, filepath.Join(dir, "other.db"))
	require.NoFileExists(t, filepath.Join(dir, "missing.db"), "a snapshot does not create its source")
}

// A snapshot that does not match its manifest is refused as a mismatch,
// with the reason: a byte flipped anywhere, a truncated or extended file,
// another snapshot's manifest, or a manifest whose checksum is right but
// whose counts or schema are not.
func TestVerifySnapshotRefusesAMismatch(t *testing.T) {
	b := snapshotSource(t)
	dir := t.TempDir()
	n := 0
	fresh := func() string {
		n++
		return takeSnapshot(t, b, dir, fmt.Sprintf("s%d.db", n))
	}
	size := func(path string) int64 {
		st, err := os.Stat(path)
		require.NoError(t, err)
		return st.Size()
	}

	cases := []struct {
		name   string
		tamper func(t *testing.T, path string)
		want   []string
	}{
		{"a byte flipped in the header", func(t *testing.T, p string) { flipByte(t, p, 0) }, []string{"SHA-256", "manifest says"}},
		{"a byte flipped in the middle", func(t *testing.T, p string) { flipByte(t, p, size(p)/2+17) }, []string{"SHA-256", "manifest says"}},
		{"the last byte flipped", func(t *testing.T, p string) { flipByte(t, p, size(p)-1) }, []string{"SHA-256", "manifest says"}},
		{"truncated by half", func(t *testing.T, p string) { require.NoError(t, os.Truncate(p, size(p)/2)) },
			[]string{"SHA-256", "manifest says"}},
		{"truncated by one byte", func(t *testing.T, p string) { require.NoError(t, os.Truncate(p, size(p)-1)) },
			[]string{"bytes", "manifest says"}},
		{"truncated to nothing", func(t *testing.T, p string) { require.NoError(t, os.Truncate(p, 0)) }, []string{"(0 bytes)"}},
		{"extended by a page", func(t *testing.T, p string) { require.NoError(t, os.Truncate(p, size(p)+4096)) },
			[]string{"SHA-256", "manifest says"}},
		{"another snapshot's manifest", func(t *testing.T, p string) {
			// Another database: the same fixture (the same seeded IDs and
			// clock) and one task more.
			o := snapshotSource(t)
			o.submit()
			other := takeSnapshot(t, o, dir, "other.db")
			om, err := ReadManifest(other)
			require.NoError(t, err)
			pm, err := ReadManifest(p)
			require.NoError(t, err)
			require.NotEqual(t, pm.SHA256, om.SHA256)
			writeManifest(t, p, om)
			writeManifest(t, other, pm)
			_, err = VerifySnapshot(b.ctx, other)
			requireRefused(t, err, ErrSnapshotMismatch, pm.SHA256)
		}, []string{"SHA-256", "manifest says"}},
		{"the right checksum with one task more", func(t *testing.T, p string) {
			reseal(t, p, func(m *Manifest) { m.Tasks++ })
		}, []string{"8 tasks", "manifest says 9 tasks"}},
		{"the right checksum with states moved", func(t *testing.T, p string) {
			reseal(t, p, func(m *Manifest) { m.States["queued"]--; m.States["completed"]++ })
		}, []string{"queued=3", "manifest says 8 tasks", "queued=2", "completed=2"}},
		{"the right checksum with an event fewer", func(t *testing.T, p string) {
			reseal(t, p, func(m *Manifest) { m.Events-- })
		}, []string{"events", "manifest says"}},
		{"the right checksum with an older schema", func(t *testing.T, p string) {
			reseal(t, p, func(m *Manifest) { m.SchemaVersion--; m.Migrations = m.Migrations[:len(m.Migrations)-1] })
		}, []string{"schema version " + strconv.Itoa(SchemaVersion()), "manifest says " + strconv.Itoa(SchemaVersion()-1)}},
		{"no manifest", func(t *testing.T, p string) { require.NoError(t, os.Remove(ManifestPath(p))) },
			[]string{"manifest of", "no such file"}},
		{"a manifest that is not JSON", func(t *testing.T, p string) {
			require.NoError(t, os.WriteFile(ManifestPath(p), []byte("sha256 abc\n"), 0o644))
		}, []string{"manifest of"}},
		{"a manifest of another format", func(t *testing.T, p string) {
			reseal(t, p, func(m *Manifest) { m.Format = "leasehold-snapshot-0" })
		}, []string{`format "leasehold-snapshot-0"`, manifestFormat}},
		{"a manifest without a format", func(t *testing.T, p string) {
			reseal(t, p, func(m *Manifest) { m.Format = "" })
		}, []string{`format ""`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := fresh()
			_, err := VerifySnapshot(b.ctx, path)
			require.NoError(t, err, "the snapshot verifies before it is tampered with")
			c.tamper(t, path)
			v, err := VerifySnapshot(b.ctx, path)
			requireRefused(t, err, ErrSnapshotMismatch, c.want...)
			require.NotErrorIs(t, err, ErrSnapshotCorrupt)
			require.Contains(t, err.Error(), path, "the refusal names the file")
			require.Less(t, len(v.Checks), 5, "the refusing check is not listed as passed: %v", v.Checks)
		})
	}

	// A manifest whose snapshot is gone is refused too.
	path := fresh()
	require.NoError(t, os.Remove(path))
	_, err := VerifySnapshot(b.ctx, path)
	requireRefused(t, err, ErrSnapshotCorrupt, path)
}

// Corruption behind a manifest resealed to match it passes the checksum:
// SQLite's integrity check catches a damaged b-tree page, and the refusal
// says so as ErrSnapshotCorrupt.
func TestVerifySnapshotRefusesCorruptionBehindAResealedManifest(t *testing.T) {
	b := snapshotSource(t)
	dir := t.TempDir()
	cases := []struct {
		name   string
		offset func(t *testing.T, path string) int64
	}{
		// The first byte of a b-tree page is its type (0x0d for a table
		// leaf); 0xf2 is no type at all.
		{"the tasks root page's type", func(t *testing.T, p string) int64 {
			root, size := rootPage(t, p, "tasks")
			return (root - 1) * size
		}},
		// Bytes 8-9 of a leaf page hold its first cell's offset: flipping
		// the low byte points it into the middle of another cell.
		{"a cell pointer of the tasks root page", func(t *testing.T, p string) int64 {
			root, size := rootPage(t, p, "tasks")
			return (root-1)*size + 9
		}},
		{"the events root page's type", func(t *testing.T, p string) int64 {
			root, size := rootPage(t, p, "events")
			return (root - 1) * size
		}},
		// The file's magic string: SQLite no longer takes it for a database.
		{"the file header's magic", func(t *testing.T, p string) int64 { return 0 }},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := takeSnapshot(t, b, dir, fmt.Sprintf("c%d.db", i))
			flipByte(t, path, c.offset(t, path))
			reseal(t, path, nil)
			v, err := VerifySnapshot(b.ctx, path)
			requireRefused(t, err, ErrSnapshotCorrupt, path)
			require.NotErrorIs(t, err, ErrSnapshotMismatch)
			require.Equal(t, []string{"checksum: SHA-256 and size match the manifest"}, v.Checks,
				"the checksum passed; the next check refused")
			_, err = Restore(b.ctx, path, filepath.Join(dir, fmt.Sprintf("restored-%d.db", i)))
			requireRefused(t, err, ErrSnapshotCorrupt)
			require.NoFileExists(t, filepath.Join(dir, fmt.Sprintf("restored-%d.db", i)))
		})
	}
}

// Rows changed through raw SQL so that a model invariant breaks, with the
// manifest resealed to match, are refused as corrupt, naming the invariant
// (or the counter) that broke. A change the schema's own CHECK constraints
// forbid is caught earlier, by the integrity check.
func TestVerifySnapshotRefusesABrokenInvariant(t *testing.T) {
	b := snapshotSource(t)
	dir := t.TempDir()
	cases := []struct {
		name string
		sql  []string
		want []string
	}{
		{"a cancelled task that names no one", []string{"UPDATE tasks SET cancelled_by = '' WHERE state = 'cancelled'"},
			[]string{model.InvCancelledBy}},
		{"a waiting task whose recorded version is not its version",
			[]string{"UPDATE tasks SET approval_version = approval_version + 1 WHERE state = 'waiting_for_approval'"},
			[]string{model.InvApprovalVersion, "recorded version"}},
		{"a queued task carrying a terminal reason", []string{"UPDATE tasks SET reason = 'budget_exhausted' WHERE state = 'queued'"},
			[]string{model.InvReasonMatches, "budget_exhausted"}},
		{"more attempts charged than allowed", []string{"UPDATE tasks SET attempts_charged = attempts_max + 1 WHERE state = 'needs_review'"},
			[]string{model.InvAttempts}},
		{"a state counter that disagrees with the tasks", []string{"UPDATE tallies SET n = n + 1 WHERE name = 'state:queued'"},
			[]string{"counters disagree"}},
		{"a running task without an owner", []string{"PRAGMA ignore_check_constraints = ON",
			"UPDATE tasks SET owner = '' WHERE state = 'running'"}, []string{"integrity check", "CHECK constraint failed"}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := takeSnapshot(t, b, dir, fmt.Sprintf("i%d.db", i))
			before, err := ReadManifest(path)
			require.NoError(t, err)
			execRaw(t, path, c.sql...)
			actual, err := describe(b.ctx, path)
			require.NoError(t, err)
			require.Equal(t, manifestState(before), manifestState(actual), "the change moves no count")
			reseal(t, path, nil)
			_, err = VerifySnapshot(b.ctx, path)
			requireRefused(t, err, ErrSnapshotCorrupt, c.want...)
			require.NotErrorIs(t, err, ErrSnapshotMismatch)
		})
	}
}

// A database at a schema version newer than this build's is refused by
// CreateSnapshot, and a snapshot at one (with a manifest that says so) by
// VerifySnapshot and Restore, naming both versions.
func TestSnapshotOfANewerSchemaIsRefused(t *testing.T) {
	b := snapshotSource(t)
	dir := t.TempDir()
	const future = 999
	ours := strconv.Itoa(SchemaVersion())
	addFuture := fmt.Sprintf("INSERT INTO schema_migrations (version, name, checksum, applied_at) VALUES (%d, 'future', 'x', 0)", future)

	// A snapshot taken before the future migration, then changed as the
	// newer build would have, with a manifest that matches.
	path := takeSnapshot(t, b, dir, "newer.db")
	execRaw(t, path, addFuture)
	reseal(t, path, func(m *Manifest) {
		m.SchemaVersion = future
		m.Migrations = append(m.Migrations, "x")
	})
	actual, err := describe(b.ctx, path)
	require.NoError(t, err)
	require.Equal(t, future, actual.SchemaVersion)
	_, err = VerifySnapshot(b.ctx, path)
	requireRefused(t, err, ErrSchemaTooNew, strconv.Itoa(future), ours)
	to := filepath.Join(dir, "restored.db")
	_, err = Restore(b.ctx, path, to)
	requireRefused(t, err, ErrSchemaTooNew, strconv.Itoa(future), ours)
	require.NoFileExists(t, to)

	// The source itself moves on to the future version: no snapshot is
	// taken of it.
	b.close()
	execRaw(t, b.path, addFuture)
	out := filepath.Join(dir, "of-newer.db")
	_, err = CreateSnapshot(b.ctx, b.path, out, b.clock.Now())
	requireRefused(t, err, ErrSchemaTooNew, strconv.Itoa(future), ours)
	require.NoFileExists(t, out)
	require.NoFileExists(t, ManifestPath(out))
}

// Restore writes a verified snapshot, byte for byte, to a path where no
// database is; the copy opens as a queue holding the source's tasks.
func TestRestore(t *testing.T) {
	b := snapshotSource(t)
	dir := t.TempDir()
	path := takeSnapshot(t, b, dir, "good.db")
	m, err := ReadManifest(path)
	require.NoError(t, err)
	sourceTasks, err := b.q.List(b.ctx, model.ListFilter{Limit: model.ListLimitMax})
	require.NoError(t, err)

	// Never over an existing database, or one whose WAL or shared memory
	// file is still there (a live database whose main file was moved).
	for _, suffix := range []string{"", "-wal", "-shm"} {
		t.Run("target"+suffix+" exists", func(t *testing.T) {
			to := filepath.Join(t.TempDir(), "prod.db")
			require.NoError(t, os.WriteFile(to+suffix, []byte("keep me"), 0o644))
			_, err := Restore(b.ctx, path, to)
			requireRefused(t, err, model.ErrInvalidInput, to+suffix, "exists")
			var v *model.ValidationError
			require.ErrorAs(t, err, &v)
			require.Equal(t, "to", v.Field)
			got, err := os.ReadFile(to + suffix)
			require.NoError(t, err)
			require.Equal(t, "keep me", string(got))
			if suffix != "" {
				require.NoFileExists(t, to)
			}
		})
	}
	t.Run("the source database", func(t *testing.T) {
		before := fileSHA256(t, b.path)
		_, err := Restore(b.ctx, path, b.path)
		requireRefused(t, err, model.ErrInvalidInput, "exists")
		require.Equal(t, before, fileSHA256(t, b.path))
	})

	// Never an unverified snapshot.
	t.Run("a tampered snapshot", func(t *testing.T) {
		bad := takeSnapshot(t, b, t.TempDir(), "bad.db")
		flipByte(t, bad, 100)
		to := filepath.Join(t.TempDir(), "prod.db")
		_, err := Restore(b.ctx, bad, to)
		requireRefused(t, err, ErrSnapshotMismatch, "SHA-256")
		require.NoFileExists(t, to)
	})
	t.Run("a snapshot without a manifest", func(t *testing.T) {
		bare := takeSnapshot(t, b, t.TempDir(), "bare.db")
		require.NoError(t, os.Remove(ManifestPath(bare)))
		to := filepath.Join(t.TempDir(), "prod.db")
		_, err := Restore(b.ctx, bare, to)
		requireRefused(t, err, ErrSnapshotMismatch, "manifest")
		require.NoFileExists(t, to)
	})

	// A verified snapshot: a byte-identical copy that opens as a queue.
	to := filepath.Join(t.TempDir(), "restored.db")
	v, err := Restore(b.ctx, path, to)
	require.NoError(t, err)
	require.Equal(t, m, v.Manifest)
	require.Len(t, v.Checks, 5, "the restore verified the snapshot: %v", v.Checks)
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	got, err := os.ReadFile(to)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "the restored file is byte-identical to the snapshot")
	require.Equal(t, m.SHA256, fileSHA256(t, to))

	restored := openBundle(t, to, b.clock, 2)
	tasks, err := restored.q.List(restored.ctx, model.ListFilter{Limit: model.ListLimitMax})
	require.NoError(t, err)
	require.Equal(t, sourceTasks, tasks, "every task, field by field")
	require.NoError(t, restored.q.CheckCounters(restored.ctx))
	// The restored queue works: a queued task can be claimed.
	claimed := restored.claim("w2")
	require.Equal(t, model.Running, restored.state(claimed.Claim.TaskID))
}

// A snapshot and its manifest are created exclusively: a name taken by a
// symbolic link (to a file outside, or dangling) or a file, before the
// copy or while it was being made, is refused; the link's target keeps
// its bytes; nothing is left behind (no manifest without its snapshot, no
// work directory).
func TestCreateSnapshotNeverWritesThroughALink(t *testing.T) {
	b := snapshotSource(t)
	dir, outside := t.TempDir(), t.TempDir()
	victim := filepath.Join(outside, "victim.txt")
	require.NoError(t, os.WriteFile(victim, []byte("an operator's file"), 0o644))
	out := filepath.Join(dir, "snap.db")
	for _, target := range []string{victim, filepath.Join(outside, "none")} {
		for _, name := range []string{ManifestPath(out), out} {
			require.NoError(t, os.Symlink(target, name))
			_, err := CreateSnapshot(b.ctx, b.path, out, b.clock.Now())
			requireRefused(t, err, model.ErrInvalidInput, name+" exists; a snapshot never overwrites")
			// The same link made after the first look, as the copy ends.
			copied := filepath.Join(t.TempDir(), "copy.db")
			require.NoError(t, os.WriteFile(copied, []byte("a finished copy"), 0o644))
			err = publishSnapshot(copied, out, []byte("{}\n"))
			requireRefused(t, err, model.ErrInvalidInput, name+" exists; a snapshot never overwrites")
			require.NoError(t, os.Remove(name))
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			require.Empty(t, entries, "nothing left beside the snapshot's name")
		}
	}
	got, err := os.ReadFile(victim)
	require.NoError(t, err)
	require.Equal(t, "an operator's file", string(got))

	m, err := CreateSnapshot(b.ctx, b.path, out, b.clock.Now())
	require.NoError(t, err)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		require.True(t, e.Type().IsRegular(), e.Name())
		names = append(names, e.Name())
	}
	require.ElementsMatch(t, []string{"snap.db", "snap.db.manifest.json"}, names, "no work directory is left")
	v, err := VerifySnapshot(b.ctx, out)
	require.NoError(t, err)
	require.Equal(t, m, v.Manifest)
}

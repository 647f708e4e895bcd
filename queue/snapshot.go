package queue

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue/internal/sqlite"
)

// Snapshot errors: a snapshot that fails verification is refused with the
// reason, wrapped around one of these.
var (
	// ErrSnapshotCorrupt: the file fails SQLite's integrity check, cannot
	// be opened, or breaks the model's invariants.
	ErrSnapshotCorrupt = errors.New("snapshot corrupt")
	// ErrSnapshotMismatch: the file does not match its manifest (checksum,
	// size, schema version or counts).
	ErrSnapshotMismatch = errors.New("snapshot does not match its manifest")
)

// Manifest describes a snapshot, written next to it as FILE.manifest.json.
type Manifest struct {
	Format        string           `json:"format"` // "leasehold-snapshot-1"
	Source        string           `json:"source"`
	SchemaVersion int              `json:"schema_version"`
	Migrations    []string         `json:"migrations"` // applied migration checksums, in order
	Tasks         int64            `json:"tasks"`
	Events        int64            `json:"events"`
	States        map[string]int64 `json:"states"`
	SHA256        string           `json:"sha256"`
	Bytes         int64            `json:"bytes"`
	CreatedAt     string           `json:"created_at"` // RFC 3339 UTC, from the caller's clock
}

// manifestFormat names the manifest's layout.
const manifestFormat = "leasehold-snapshot-1"

// ManifestPath is where a snapshot's manifest lives.
func ManifestPath(snapshot string) string { return snapshot + ".manifest.json" }

// openRaw opens a database file as sqlite.OpenRaw does: snapshots and
// upgrades work on databases of other versions.
func openRaw(path string, readOnly bool) (db *sql.DB, checksConstraints bool, err error) {
	return sqlite.OpenRaw(path, readOnly)
}

// CreateSnapshot writes a consistent copy of the database at src to out
// (VACUUM INTO: a single read transaction, so workers may go on writing),
// then its manifest. Neither out nor its manifest may exist: a snapshot
// never overwrites, and never writes through a symbolic link. The copy is
// made in a directory of its own beside out (created for this process
// alone, so no one can put a link where SQLite writes by name); then the
// manifest and out are created with O_CREATE|O_EXCL, which fails on
// anything already there, a link (dangling or not) included, and the
// copy is renamed over the empty out (a rename replaces the name, never
// what a link there would point to). now stamps the manifest. A database
// at a schema version newer than this build's is refused.
func CreateSnapshot(ctx context.Context, src, out string, now time.Time) (Manifest, error) {
	if err := sqliteFile("snapshot", src); err != nil {
		return Manifest{}, err
	}
	for _, p := range []string{out, ManifestPath(out)} {
		if _, err := os.Lstat(p); err == nil {
			return Manifest{}, neverOverwrites(p)
		}
	}
	if _, err := os.Stat(src); err != nil {
		return Manifest{}, fmt.Errorf("snapshot: %w", err)
	}
	db, _, err := openRaw(src, false)
	if err != nil {
		return Manifest{}, fmt.Errorf("snapshot: open %s: %w", src, err)
	}
	defer db.Close()
	// A database at a schema this build does not know (a newer one) is
	// refused: this build could not verify the copy.
	if _, _, err := planFile(ctx, db); err != nil {
		return Manifest{}, fmt.Errorf("snapshot %s: %w", src, err)
	}
	work, err := os.MkdirTemp(filepath.Dir(out), ".leasehold-snapshot-")
	if err != nil {
		return Manifest{}, fmt.Errorf("snapshot: %w", err)
	}
	defer os.RemoveAll(work)
	copied := filepath.Join(work, "snapshot.db")
	if _, err := db.ExecContext(ctx, "VACUUM INTO ?", copied); err != nil {
		return Manifest{}, fmt.Errorf("snapshot: copy %s: %w", src, err)
	}
	if err := syncFile(copied); err != nil {
		return Manifest{}, fmt.Errorf("snapshot: %w", err)
	}
	m, err := describe(ctx, copied)
	if err != nil {
		return Manifest{}, err
	}
	m.Source, m.CreatedAt = src, now.UTC().Format(time.RFC3339Nano)
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return Manifest{}, err
	}
	if err := publishSnapshot(copied, out, append(b, '\n')); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// neverOverwrites refuses path, which exists (as a file, a directory or a
// symbolic link).
func neverOverwrites(path string) error {
	return &model.ValidationError{Field: "out", Problem: fmt.Sprintf("%s exists; a snapshot never overwrites", path)}
}

// createExclusive creates path for writing, failing if anything is there
// (O_EXCL: a symbolic link too, whatever it points to).
func createExclusive(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, os.ErrExist) {
		return nil, neverOverwrites(path)
	}
	return f, err
}

// publishSnapshot puts the finished copy at out and manifest beside it:
// the manifest and out created exclusively, the copy renamed over the
// empty out, the directory synced. On a failure it removes what it
// created.
func publishSnapshot(copied, out string, manifest []byte) (err error) {
	var created []string
	defer func() {
		if err != nil {
			for _, p := range created {
				os.Remove(p)
			}
		}
	}()
	mf, err := createExclusive(ManifestPath(out))
	if err != nil {
		return fmt.Errorf("snapshot: write manifest: %w", err)
	}
	created = append(created, ManifestPath(out))
	_, err = mf.Write(manifest)
	if err == nil {
		err = mf.Sync()
	}
	if cerr := mf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("snapshot: write manifest: %w", err)
	}
	claim, err := createExclusive(out)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	created = append(created, out)
	if err := claim.Close(); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if err := os.Rename(copied, out); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return syncDir(filepath.Dir(out))
}

// syncFile flushes the file at path to the disk.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// syncDir flushes a directory's entries (a file created or renamed in
// it) to the disk.
func syncDir(dir string) error {
	if err := syncFile(dir); err != nil {
		return fmt.Errorf("snapshot: sync %s: %w", dir, err)
	}
	return nil
}

// describe reads what a manifest records from a snapshot file.
func describe(ctx context.Context, path string) (Manifest, error) {
	sum, size, err := fileDigest(path)
	if err != nil {
		return Manifest{}, err
	}
	db, _, err := openRaw(path, true)
	if err != nil {
		return Manifest{}, fmt.Errorf("%s: %v: %w", path, err, ErrSnapshotCorrupt)
	}
	defer db.Close()
	return describeDB(ctx, db, path, sum, size)
}

// describeDB reads what a manifest records from the open snapshot at path,
// whose SHA-256 and size the caller has taken.
func describeDB(ctx context.Context, db *sql.DB, path, sum string, size int64) (Manifest, error) {
	m := Manifest{Format: manifestFormat, States: map[string]int64{}, SHA256: sum, Bytes: size}
	set, err := sqlOf(backends[0])
	if err != nil {
		return m, err
	}
	applied, err := readApplied(ctx, db, set)
	if err != nil {
		return m, fmt.Errorf("%s: %v: %w", path, err, ErrSnapshotCorrupt)
	}
	for _, a := range applied {
		m.SchemaVersion = a.Version
		m.Migrations = append(m.Migrations, a.Checksum)
	}
	rows, err := db.QueryContext(ctx, "SELECT state, COUNT(*) FROM tasks GROUP BY state")
	if err != nil {
		return m, fmt.Errorf("%s: count tasks: %v: %w", path, err, ErrSnapshotCorrupt)
	}
	defer rows.Close()
	for rows.Next() {
		var state string
		var n int64
		if err := rows.Scan(&state, &n); err != nil {
			return m, fmt.Errorf("%s: %v: %w", path, err, ErrSnapshotCorrupt)
		}
		m.States[state] = n
		m.Tasks += n
	}
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM events").Scan(&m.Events); err != nil {
		return m, fmt.Errorf("%s: count events: %v: %w", path, err, ErrSnapshotCorrupt)
	}
	return m, rows.Err()
}

func fileDigest(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// ReadManifest reads a snapshot's manifest.
func ReadManifest(snapshot string) (Manifest, error) {
	var m Manifest
	b, err := os.ReadFile(ManifestPath(snapshot))
	if err != nil {
		return m, fmt.Errorf("manifest of %s: %v: %w", snapshot, err, ErrSnapshotMismatch)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("manifest of %s: %v: %w", snapshot, err, ErrSnapshotMismatch)
	}
	if m.Format != manifestFormat {
		return m, fmt.Errorf("manifest of %s: format %q, want %q: %w", snapshot, m.Format, manifestFormat, ErrSnapshotMismatch)
	}
	return m, nil
}

// Verification is what VerifySnapshot checked, each line a check passed.
type Verification struct {
	Manifest Manifest
	Checks   []string
}

// VerifySnapshot checks a snapshot against its manifest before anyone
// relies on it: the checksum and size, SQLite's integrity check, a schema
// version this build supports with the migrations it knows, the model's
// invariants over every task, the counters the triggers keep, and the
// counts against the manifest. A failure says which check and why.
func VerifySnapshot(ctx context.Context, snapshot string) (Verification, error) {
	v := Verification{}
	if err := sqliteFile("verify snapshot", snapshot); err != nil {
		return v, err
	}
	m, err := ReadManifest(snapshot)
	if err != nil {
		return v, err
	}
	v.Manifest = m
	sum, size, err := fileDigest(snapshot)
	if err != nil {
		return v, fmt.Errorf("%s: %v: %w", snapshot, err, ErrSnapshotCorrupt)
	}
	if size != m.Bytes || sum != m.SHA256 {
		return v, fmt.Errorf("%s: SHA-256 %s (%d bytes), manifest says %s (%d bytes): %w", snapshot, sum, size, m.SHA256, m.Bytes, ErrSnapshotMismatch)
	}
	v.Checks = append(v.Checks, "checksum: SHA-256 and size match the manifest")
	db, checksConstraints, err := openRaw(snapshot, true)
	if err != nil {
		return v, fmt.Errorf("%s: %v: %w", snapshot, err, ErrSnapshotCorrupt)
	}
	defer db.Close()
	var integrity string
	if err := db.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&integrity); err != nil || integrity != "ok" {
		return v, fmt.Errorf("%s: integrity check: %s %v: %w", snapshot, integrity, err, ErrSnapshotCorrupt)
	}
	if checksConstraints {
		v.Checks = append(v.Checks, "integrity: SQLite integrity_check ok")
	} else {
		v.Checks = append(v.Checks, "integrity: SQLite integrity_check ok (read-only here, so CHECK constraints were not re-checked)")
	}
	if _, _, err := planFile(ctx, db); err != nil {
		return v, fmt.Errorf("%s: %w", snapshot, err)
	}
	actual, err := describeDB(ctx, db, snapshot, sum, size)
	if err != nil {
		return v, err
	}
	if actual.SchemaVersion != m.SchemaVersion || fmt.Sprint(actual.Migrations) != fmt.Sprint(m.Migrations) {
		return v, fmt.Errorf("%s: schema version %d, manifest says %d: %w", snapshot, actual.SchemaVersion, m.SchemaVersion, ErrSnapshotMismatch)
	}
	v.Checks = append(v.Checks, fmt.Sprintf("schema: version %d, every applied migration known to this build (up to %d)", actual.SchemaVersion, SchemaVersion()))
	if err := checkTaskInvariants(ctx, db); err != nil {
		return v, fmt.Errorf("%s: %v: %w", snapshot, err, ErrSnapshotCorrupt)
	}
	v.Checks = append(v.Checks, fmt.Sprintf("invariants: all %d tasks satisfy the model's invariants; counters agree with the tasks", actual.Tasks))
	if actual.Tasks != m.Tasks || actual.Events != m.Events || fmt.Sprint(sortedCounts(actual.States)) != fmt.Sprint(sortedCounts(m.States)) {
		return v, fmt.Errorf("%s: %d tasks %v and %d events, manifest says %d tasks %v and %d events: %w", snapshot,
			actual.Tasks, sortedCounts(actual.States), actual.Events, m.Tasks, sortedCounts(m.States), m.Events, ErrSnapshotMismatch)
	}
	v.Checks = append(v.Checks, fmt.Sprintf("counts: %d tasks by state and %d events match the manifest", m.Tasks, m.Events))
	return v, nil
}

func sortedCounts(m map[string]int64) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(out)
	return out
}

// checkTaskInvariants reads every task and checks the model's per-task
// invariants, and the counters the triggers keep.
func checkTaskInvariants(ctx context.Context, db *sql.DB) error {
	set, err := sqlOf(backends[0])
	if err != nil {
		return err
	}
	columns, err := forSchemaOf(ctx, db, set.queries["task_columns"].text)
	if err != nil {
		return err
	}
	rows, err := db.QueryContext(ctx, "SELECT "+columns+" FROM tasks ORDER BY seq")
	if err != nil {
		return err
	}
	tasks, err := scanTasks(rows)
	if err != nil {
		return err
	}
	for _, t := range tasks {
		if vs := model.CheckTask(t); len(vs) > 0 {
			return vs[0]
		}
	}
	check, err := forSchemaOf(ctx, db, set.queries[qCountersCheck.String()].text)
	if err != nil {
		return err
	}
	return checkCounters(db.QueryRowContext(ctx, check), thirdCheck(backends[0].Capabilities()))
}

// forSchemaOf returns a query text of this build (the {task_columns} or a
// whole query) as db's schema can run it: as it is, or, for a database
// older than schema version 4, with attempts_charged in place of the
// attempts_failed it lacks (what migration 0004 starts it at), older
// than version 5, with user in place of user_id (migration 0005 renames
// it), and older than version 9, with the kind synthetic, which migration
// 0009 gives every task it finds.
func forSchemaOf(ctx context.Context, db *sql.DB, text string) (string, error) {
	has := func(column string) (bool, error) {
		var n int
		err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM pragma_table_info('tasks') WHERE name = ?", column).Scan(&n)
		if err != nil {
			return false, fmt.Errorf("queue: read the tasks' columns: %w", err)
		}
		return n > 0, nil
	}
	kind, err := has("kind")
	if err != nil {
		return "", err
	}
	if !kind {
		// Before migration 0009 every task was synthetic.
		text = strings.Replace(text, "updated_at, attempts_failed, kind", "updated_at, attempts_failed, '"+model.KindSynthetic+"' AS kind", 1)
	}
	failed, err := has("attempts_failed")
	if err != nil {
		return "", err
	}
	if !failed {
		text = strings.Replace(text, "attempts_failed", "attempts_charged AS attempts_failed", 1)
	}
	userID, err := has("user_id")
	if err != nil {
		return "", err
	}
	if !userID {
		text = strings.ReplaceAll(text, "user_id", "user")
	}
	return text, nil
}

// Restore copies a verified snapshot to a new database file at to. It
// never writes over an existing file (a live database or not), and
// refuses a snapshot that fails verification.
func Restore(ctx context.Context, snapshot, to string) (Verification, error) {
	if err := sqliteFile("restore", to); err != nil {
		return Verification{}, err
	}
	for _, p := range []string{to, to + "-wal", to + "-shm"} {
		if _, err := os.Stat(p); err == nil {
			return Verification{}, &model.ValidationError{Field: "to", Problem: fmt.Sprintf("%s exists; restore never writes over a database", p)}
		}
	}
	v, err := VerifySnapshot(ctx, snapshot)
	if err != nil {
		return v, err
	}
	if err := copyFile(snapshot, to); err != nil {
		return v, fmt.Errorf("restore to %s: %w", to, err)
	}
	sum, _, err := fileDigest(to)
	if err != nil || sum != v.Manifest.SHA256 {
		os.Remove(to)
		return v, fmt.Errorf("restore to %s: the copy's SHA-256 differs from the snapshot's: %w", to, ErrSnapshotMismatch)
	}
	return v, nil
}

// copyFile copies src to a new file dst and syncs it.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		os.Remove(dst)
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		os.Remove(dst)
		return err
	}
	return out.Close()
}

// sqliteFile refuses, for op, a path another store handles (a PostgreSQL
// URL, whose password it does not repeat).
func sqliteFile(op, path string) error {
	if b := backendFor(path); !b.Capabilities().LocalFile {
		return fmt.Errorf("queue: %s: %s is a %s database, and %w: back it up with its own tools (pg_dump, pg_restore)",
			op, RedactURL(path), b.Dialect(), ErrSQLiteOnly)
	}
	return nil
}

// inspectFile is Inspect for a SQLite file.
func inspectFile(ctx context.Context, path string) ([]AppliedMigration, []Migration, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, nil, err
	}
	db, _, err := openRaw(path, true)
	if err != nil {
		return nil, nil, err
	}
	defer db.Close()
	return planFile(ctx, db)
}

// OpenReadOnlyDB opens the SQLite database file at path read-only as Open
// does with Options.ReadOnly, without checking its schema (snapshots and
// upgrades read databases of other versions), and makes a first read to
// be sure it can be read. It has one connection.
func OpenReadOnlyDB(ctx context.Context, path string) (*sql.DB, error) {
	return sqlite.OpenReadOnly(ctx, path)
}

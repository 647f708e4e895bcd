package cli

// The release commands (snapshot create|verify, restore, migrate), the
// audit trail's reader, and operator safety through the CLI and the HTTP
// server: every path is checked against the allowed directory before a
// file is opened, nothing is written over a database, a tampered snapshot
// is refused with the reason, every acting command records its actor and
// the scope it acted under, and a token acts only within its scopes.
//
// Tests that set LEASEHOLD_DATA_DIR (t.Setenv) do not run in parallel.

import (
	"bufio"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/evidence"
	"github.com/leasehold/leasehold/internal/testkit"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/randomid"
	"github.com/leasehold/leasehold/reports"
	"github.com/leasehold/leasehold/wire"
)

// dataFixture is a fixture whose directory is the allowed directory
// (LEASEHOLD_DATA_DIR), with a database holding two tasks: one queued and
// one cancelled.
func dataFixture(t *testing.T) (*fixture, []string) {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	t.Setenv("LEASEHOLD_DATA_DIR", dir)
	f := &fixture{t: t, dir: dir, db: filepath.Join(dir, "leasehold.db")}
	requireOK(t, f.do("migrate", "--actor", "ops")) // the command line's way to make a database
	queued := f.submit("ana", "k1", onePayload)
	cancelled := f.submit("ana", "k2", onePayload)
	requireOK(t, f.do("cancel", cancelled, "--actor", "ops"))
	return f, []string{queued, cancelled}
}

// tree returns every entry under dir (recursively, not following symbolic
// links): files with the SHA-256 of their contents, links with their
// targets, directories as such.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			out[rel] = "link " + target
			return err
		case d.IsDir():
			out[rel] = "dir"
		default:
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			out[rel] = hex.EncodeToString(sum[:])
		}
		return nil
	})
	require.NoError(t, err)
	return withoutReaderFiles(out)
}

// sha256File returns the hex SHA-256 of a file.
func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// resealManifest rewrites a snapshot's manifest with the file's current
// checksum and size, as someone who tampered with the file might.
func resealManifest(t *testing.T, snap string) {
	t.Helper()
	m, err := queue.ReadManifest(snap)
	require.NoError(t, err)
	st, err := os.Stat(snap)
	require.NoError(t, err)
	m.SHA256, m.Bytes = sha256File(t, snap), st.Size()
	b, err := json.Marshal(m)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(queue.ManifestPath(snap), b, 0o644))
}

// execSQL runs statements on a database file outside the queue.
func execSQL(t *testing.T, path string, statements ...string) {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	for _, s := range statements {
		_, err := db.Exec(s)
		require.NoError(t, err, s)
	}
}

// auditLines runs audit --format jsonl with args against db and decodes
// every line.
func auditLines(t *testing.T, db string, args ...string) []wire.Event {
	t.Helper()
	r := lh(t, append([]string{"audit", "--db", db, "--format", "jsonl"}, args...)...)
	requireOK(t, r)
	var out []wire.Event
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	for sc.Scan() {
		var e wire.Event
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(&e), "one JSON object per line: %q", sc.Text())
		out = append(out, e)
	}
	require.NoError(t, sc.Err())
	return out
}

// taskRows reads every task's identity and progress straight from a
// database file of any schema version.
func taskRows(t *testing.T, path string) []string {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)&_pragma=query_only(1)")
	require.NoError(t, err)
	defer db.Close()
	rows, err := db.Query("SELECT id, state, reason, version, cost_used, steps_used, attempts_charged, checkpoint FROM tasks ORDER BY seq")
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id, state, reason, checkpoint string
		var version, cost, steps, attempts int64
		require.NoError(t, rows.Scan(&id, &state, &reason, &version, &cost, &steps, &attempts, &checkpoint))
		out = append(out, fmt.Sprintf("%s %s %s v%d cost=%d steps=%d attempts=%d checkpoint=%s", id, state, reason, version, cost, steps, attempts, checkpoint))
	}
	require.NoError(t, rows.Err())
	return out
}

// snapshot create writes a snapshot and its manifest inside the allowed
// directory; verify lists its checks; restore writes a verified copy to a
// new file and records who restored it, under the operate scope.
func TestSnapshotCreateVerifyRestore(t *testing.T) {
	f, ids := dataFixture(t)
	snap := filepath.Join(f.dir, "s1.db")

	r := f.lh([]string{"snapshot", "create"}, "--out", snap)
	requireOK(t, r)
	require.Contains(t, r.stdout, fmt.Sprintf("snapshot %s: schema version %d, 2 tasks", snap, queue.SchemaVersion()))
	require.Contains(t, r.stdout, "manifest "+queue.ManifestPath(snap))
	m, err := queue.ReadManifest(snap)
	require.NoError(t, err)
	require.Equal(t, sha256File(t, snap), m.SHA256)
	require.Equal(t, map[string]int64{"queued": 1, "cancelled": 1}, m.States)
	require.Equal(t, f.db, m.Source)

	r = f.lh([]string{"snapshot", "create"}, "--out", filepath.Join(f.dir, "s2.db"), "--json")
	requireOK(t, r)
	var m2 queue.Manifest
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &m2), r.stdout)
	require.Equal(t, int64(2), m2.Tasks)
	require.Equal(t, sha256File(t, filepath.Join(f.dir, "s2.db")), m2.SHA256)

	r = lh(t, "snapshot", "verify", snap)
	requireOK(t, r)
	require.True(t, strings.HasPrefix(r.stdout, fmt.Sprintf("snapshot %s verified:\n", snap)), r.stdout)
	require.Equal(t, 5, strings.Count(r.stdout, "\n  ok "), r.stdout)
	for _, check := range []string{"ok checksum:", "ok integrity:", "ok schema:", "ok invariants:", "ok counts:"} {
		require.Contains(t, r.stdout, check)
	}
	r = lh(t, "snapshot", "verify", "--json", snap)
	requireOK(t, r)
	var v queue.Verification
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v), r.stdout)
	require.Equal(t, m, v.Manifest)
	require.Len(t, v.Checks, 5)

	restored := filepath.Join(f.dir, "restored.db")
	r = lh(t, "restore", snap, "--to", restored, "--actor", "rita")
	requireOK(t, r)
	require.Contains(t, r.stdout, fmt.Sprintf("restored %s to %s after verifying it:", snap, restored))
	require.Equal(t, 5, strings.Count(r.stdout, "\n  ok "), r.stdout)
	require.Equal(t, m.SHA256, sha256File(t, snap), "restoring leaves the snapshot as it was")

	// The restored database holds the tasks and says who restored it.
	for _, id := range ids {
		r := lh(t, "status", id, "--json", "--db", restored)
		requireOK(t, r)
		require.Equal(t, f.statusJSON(id)["state"], decodeObject(t, r.stdout)["state"])
	}
	events := auditLines(t, restored, "--actor", "rita")
	require.Len(t, events, 1)
	require.Equal(t, model.EventRestored, events[0].Kind)
	require.Equal(t, model.ScopeOperate, events[0].Scope)
	require.Contains(t, events[0].Detail, m.SHA256)
	require.Empty(t, auditLines(t, f.db, "--actor", "rita"), "the live database is not touched")
}

func decodeObject(t *testing.T, s string) map[string]any {
	t.Helper()
	var out map[string]any
	require.NoError(t, json.Unmarshal([]byte(s), &out), s)
	return out
}

// Every path a release command reads or writes is checked before anything
// is opened: outside the allowed directory (another directory, a ../ path,
// a link to elsewhere), the database itself or a companion file, a file
// that exists, a symbolic link, an empty or malformed name. Each exits 2
// naming the flag and the problem, and changes no file.
func TestReleaseCommandsRefuseUnsafePaths(t *testing.T) {
	f, _ := dataFixture(t)
	snap := filepath.Join(f.dir, "good.db")
	requireOK(t, f.lh([]string{"snapshot", "create"}, "--out", snap))
	elsewhere, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	outsideDB := filepath.Join(elsewhere, "other.db")
	makeDB(t, outsideDB)
	requireOK(t, lh(t, "submit", "--db", outsideDB, "--user", "ana", "--key", "k1", "--payload", onePayload,
		"--cost-budget", "10", "--steps-max", "5"))
	outsideSnap := filepath.Join(elsewhere, "snap.db")
	t.Setenv("LEASEHOLD_DATA_DIR", elsewhere)
	requireOK(t, lh(t, "snapshot", "create", "--db", outsideDB, "--out", outsideSnap))
	t.Setenv("LEASEHOLD_DATA_DIR", f.dir)

	existing := filepath.Join(f.dir, "exists.db")
	require.NoError(t, os.WriteFile(existing, []byte("an operator's file"), 0o644))
	require.NoError(t, os.Symlink(filepath.Join(f.dir, "target.db"), filepath.Join(f.dir, "link.db")))
	require.NoError(t, os.Symlink(filepath.Join(elsewhere, "x.db"), filepath.Join(f.dir, "link-out.db")))
	require.NoError(t, os.Symlink(snap, filepath.Join(f.dir, "snap-link.db")))
	require.NoError(t, os.Symlink(elsewhere, filepath.Join(f.dir, "elsewhere")))
	require.NoError(t, os.WriteFile(filepath.Join(f.dir, "orphan.db-wal"), []byte("a WAL left behind"), 0o644))
	// Manifests in the way of a new snapshot: a link to an operator's file
	// outside (which snapshot create once overwrote), a dangling link, a
	// file.
	victim := filepath.Join(elsewhere, "victim.txt")
	require.NoError(t, os.WriteFile(victim, []byte("an operator's file outside"), 0o644))
	require.NoError(t, os.Symlink(victim, queue.ManifestPath(filepath.Join(f.dir, "m-link.db"))))
	require.NoError(t, os.Symlink(filepath.Join(elsewhere, "none.json"), queue.ManifestPath(filepath.Join(f.dir, "m-dangling.db"))))
	require.NoError(t, os.WriteFile(queue.ManifestPath(filepath.Join(f.dir, "m-file.db")), []byte("{}"), 0o644))
	create := func(out string) []string { return []string{"snapshot", "create", "--db", f.db, "--out", out} }

	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"out in another directory", create(filepath.Join(elsewhere, "s.db")), []string{"--out", "outside the allowed directory"}},
		{"out through ..", create(f.dir + "/../escape.db"), []string{"--out", "outside the allowed directory"}},
		{"out through .. and back", create(f.dir + "/../" + filepath.Base(elsewhere) + "/s.db"), []string{"--out", "outside"}},
		{"out relative to the working directory", create("s.db"), []string{"--out", "outside"}},
		{"out through a linked directory", create(filepath.Join(f.dir, "elsewhere", "s.db")), []string{"--out", "outside"}},
		{"out naming the database", create(f.db), []string{"--out", "the database itself"}},
		{"out naming the database's WAL", create(f.db + "-wal"), []string{"--out", "the database itself"}},
		{"out naming the database's shared memory", create(f.db + "-shm"), []string{"--out", "the database itself"}},
		{"out naming the database's journal", create(f.db + "-journal"), []string{"--out", "the database itself"}},
		{"out that exists", create(existing), []string{"out", "exists"}},
		{"out that is the last snapshot", create(snap), []string{"out", "exists"}},
		{"out a dangling link", create(filepath.Join(f.dir, "link.db")), []string{"--out", "symbolic link"}},
		{"out a link to elsewhere", create(filepath.Join(f.dir, "link-out.db")), []string{"--out", "symbolic link"}},
		{"out whose manifest is a link to a file outside", create(filepath.Join(f.dir, "m-link.db")), []string{"out", "m-link.db.manifest.json exists"}},
		{"out whose manifest is a dangling link", create(filepath.Join(f.dir, "m-dangling.db")), []string{"out", "m-dangling.db.manifest.json exists"}},
		{"out whose manifest exists", create(filepath.Join(f.dir, "m-file.db")), []string{"out", "m-file.db.manifest.json exists"}},
		{"out in a missing directory", create(filepath.Join(f.dir, "no", "s.db")), []string{"--out", "directory"}},
		{"out empty", create(""), []string{"--out", "path required"}},
		{"out missing", []string{"snapshot", "create", "--db", f.db}, []string{"--out", "path required"}},
		{"out with a query string", create(filepath.Join(f.dir, "s.db?mode=memory")), []string{"--out", "characters"}},
		{"out with a NUL", create(filepath.Join(f.dir, "s\x00.db")), []string{"--out", "characters"}},
		{"db in another directory", []string{"snapshot", "create", "--db", outsideDB, "--out", filepath.Join(f.dir, "s.db")},
			[]string{"--db", "outside the allowed directory"}},
		{"snapshot without a subcommand", []string{"snapshot"}, []string{"create or verify"}},
		{"snapshot unknown subcommand", []string{"snapshot", "copy"}, []string{"copy"}},
		{"verify in another directory", []string{"snapshot", "verify", outsideSnap}, []string{"SNAPSHOT: ", "outside"}},
		{"verify a link", []string{"snapshot", "verify", filepath.Join(f.dir, "snap-link.db")}, []string{"SNAPSHOT: ", "symbolic link"}},
		{"verify without a file", []string{"snapshot", "verify"}, []string{"argument"}},
		{"restore from another directory", []string{"restore", outsideSnap, "--to", filepath.Join(f.dir, "r.db")}, []string{"SNAPSHOT: ", "outside"}},
		{"restore to another directory", []string{"restore", snap, "--to", filepath.Join(elsewhere, "r.db")}, []string{"--to", "outside"}},
		{"restore to ..", []string{"restore", snap, "--to", f.dir + "/../r.db"}, []string{"--to", "outside"}},
		{"restore over an existing file", []string{"restore", snap, "--to", existing}, []string{"to", existing, "exists"}},
		{"restore over the live database", []string{"restore", snap, "--to", f.db}, []string{"to", f.db, "exists"}},
		{"restore where a WAL is left", []string{"restore", snap, "--to", filepath.Join(f.dir, "orphan.db")}, []string{"to", "orphan.db-wal", "exists"}},
		{"restore to a link", []string{"restore", snap, "--to", filepath.Join(f.dir, "link.db")}, []string{"--to", "symbolic link"}},
		{"restore without a target", []string{"restore", snap}, []string{"--to", "path required"}},
		{"restore with a bad actor", []string{"restore", snap, "--to", filepath.Join(f.dir, "r.db"), "--actor", "a b"}, []string{"actor"}},
		{"migrate a database in another directory", []string{"migrate", "--db", outsideDB}, []string{"--db", "outside the allowed directory"}},
		{"migrate a database through ..", []string{"migrate", "--db", f.dir + "/../" + filepath.Base(elsewhere) + "/other.db", "--dry-run"}, []string{"--db", "outside"}},
		{"migrate with a bad actor", []string{"migrate", "--db", f.db, "--actor", "a/b"}, []string{"actor"}},
		{"migrate unknown flag", []string{"migrate", "--db", f.db, "--bogus"}, []string{"bogus"}},
	}
	before, beforeElsewhere := tree(t, f.dir), tree(t, elsewhere)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			requireUsage(t, lh(t, c.args...), c.want...)
			require.Equal(t, before, tree(t, f.dir), "a refused command changed the allowed directory")
			require.Equal(t, beforeElsewhere, tree(t, elsewhere), "a refused command wrote outside")
		})
	}

	// Without LEASEHOLD_DATA_DIR the working directory is the allowed one:
	// the fixture's directory is outside it.
	t.Setenv("LEASEHOLD_DATA_DIR", "")
	requireUsage(t, f.lh([]string{"snapshot", "create"}, "--out", filepath.Join(f.dir, "s.db")), "--db", "outside", "LEASEHOLD_DATA_DIR")
	require.Equal(t, before, tree(t, f.dir))
}

// A migrate of a database that needs one checks the snapshot directory
// too, before it writes the snapshot.
func TestMigrateRefusesASnapshotDirectoryOutside(t *testing.T) {
	f, _ := dataFixture(t)
	old := filepath.Join(f.dir, "old.db")
	copyFixture(t, old)
	elsewhere := t.TempDir()
	before := tree(t, f.dir)
	for _, dir := range []string{elsewhere, f.dir + "/../snaps"} {
		requireUsage(t, lh(t, "migrate", "--db", old, "--snapshot-dir", dir, "--actor", "ops"), "--snapshot-dir", "outside")
	}
	require.Equal(t, before, tree(t, f.dir))
	require.Empty(t, tree(t, elsewhere))
}

// copyFixture copies queue/testdata/schema-v2.db (a database at schema
// version 2 with a task in every state) to path.
func copyFixture(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "queue", "testdata", "schema-v2.db"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o644))
}

// A snapshot that does not match its manifest, or whose manifest is gone,
// is refused by verify and restore with exit 1 and the reason; restore
// then writes nothing.
func TestTamperedSnapshotsAreRefused(t *testing.T) {
	f, _ := dataFixture(t)
	n := 0
	fresh := func() string {
		t.Helper()
		n++
		snap := filepath.Join(f.dir, fmt.Sprintf("s%d.db", n))
		requireOK(t, f.lh([]string{"snapshot", "create"}, "--out", snap))
		return snap
	}
	flip := func(t *testing.T, snap string, offset int64) {
		b, err := os.ReadFile(snap)
		require.NoError(t, err)
		b[offset] ^= 0xff
		require.NoError(t, os.WriteFile(snap, b, 0o644))
	}
	cases := []struct {
		name   string
		tamper func(t *testing.T, snap string)
		want   []string
	}{
		{"a byte flipped", func(t *testing.T, snap string) { flip(t, snap, 4096+100) }, []string{"SHA-256", "manifest says"}},
		{"truncated", func(t *testing.T, snap string) { require.NoError(t, os.Truncate(snap, 4096)) }, []string{"(4096 bytes)", "manifest says"}},
		{"another snapshot's manifest", func(t *testing.T, snap string) {
			f.submit("bo", "k"+strconv.Itoa(n), onePayload)
			other := fresh()
			b, err := os.ReadFile(queue.ManifestPath(other))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(queue.ManifestPath(snap), b, 0o644))
		}, []string{"SHA-256", "manifest says"}},
		{"a tasks count that is wrong", func(t *testing.T, snap string) {
			m, err := queue.ReadManifest(snap)
			require.NoError(t, err)
			m.Tasks++
			b, err := json.Marshal(m)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(queue.ManifestPath(snap), b, 0o644))
		}, []string{" tasks [cancelled=1 queued=", "events, manifest says"}},
		{"a damaged page behind a resealed manifest", func(t *testing.T, snap string) {
			flip(t, snap, 4*4096) // the first byte of page 5: a b-tree page's type
			resealManifest(t, snap)
		}, []string{"integrity check", "snapshot corrupt"}},
		{"a broken invariant behind a resealed manifest", func(t *testing.T, snap string) {
			execSQL(t, snap, "UPDATE tasks SET cancelled_by = '' WHERE state = 'cancelled'")
			resealManifest(t, snap)
		}, []string{model.InvCancelledBy, "snapshot corrupt"}},
		{"no manifest", func(t *testing.T, snap string) { require.NoError(t, os.Remove(queue.ManifestPath(snap))) },
			[]string{"manifest of", "no such file"}},
		{"a manifest of another format", func(t *testing.T, snap string) {
			require.NoError(t, os.WriteFile(queue.ManifestPath(snap), []byte(`{"format":"tarball-2"}`), 0o644))
		}, []string{`"tarball-2"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			snap := fresh()
			c.tamper(t, snap)
			r := lh(t, "snapshot", "verify", snap)
			requireFailed(t, r, append([]string{"refused", snap}, c.want...)...)
			to := filepath.Join(f.dir, "restored-"+filepath.Base(snap))
			requireFailed(t, lh(t, "restore", snap, "--to", to, "--actor", "ops"), c.want...)
			require.NoFileExists(t, to, "a refused restore writes nothing")
		})
	}
}

// migrate --dry-run shows the plan and changes nothing; migrate takes a
// verified snapshot first, applies the plan, records who migrated under
// the operate scope, and keeps every task; a second migrate has nothing to
// do.
func TestMigrate(t *testing.T) {
	f, _ := dataFixture(t)
	prod := filepath.Join(f.dir, "prod.db")
	copyFixture(t, prod)
	snaps := filepath.Join(f.dir, "snaps")
	tasksBefore := taskRows(t, prod)
	require.Len(t, tasksBefore, len(model.States()))
	migrations, err := queue.Migrations()
	require.NoError(t, err)
	last := migrations[len(migrations)-1]

	before, sum := tree(t, f.dir), sha256File(t, prod)
	r := lh(t, "migrate", "--db", prod, "--dry-run", "--snapshot-dir", snaps, "--actor", "olga")
	requireOK(t, r)
	require.Contains(t, r.stdout, fmt.Sprintf("database %s: schema version 2; this build: %d\n", prod, queue.SchemaVersion()))
	require.Contains(t, r.stdout, "  pending "+last.Name+" (sha256 "+last.Checksum[:16]+")\n")
	require.True(t, strings.HasSuffix(r.stdout, "dry run: nothing changed\n"), r.stdout)
	require.Equal(t, sum, sha256File(t, prod), "a dry run leaves the database byte for byte")
	require.Equal(t, before, tree(t, f.dir), "a dry run writes no file (no snapshot, no WAL)")

	// --json: the same plan as a record, and still nothing written.
	r = lh(t, "migrate", "--db", prod, "--dry-run", "--json")
	requireOK(t, r)
	var plan migrateRecord
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &plan), r.stdout)
	require.Equal(t, migrateRecord{Database: prod, From: 2, Build: queue.SchemaVersion(), DryRun: true,
		Pending: plan.Pending}, plan)
	require.Len(t, plan.Pending, queue.SchemaVersion()-2)
	require.Equal(t, pendingMigration{Name: last.Name, SHA256: last.Checksum}, plan.Pending[len(plan.Pending)-1])
	require.Equal(t, sum, sha256File(t, prod))

	// Every other command refuses the outdated database until it is migrated.
	requireFailed(t, lh(t, "list", "--db", prod), "schema version 2")

	r = lh(t, "migrate", "--db", prod, "--snapshot-dir", snaps, "--actor", "olga")
	requireOK(t, r)
	require.Contains(t, r.stdout, "verified snapshot "+snaps+string(filepath.Separator)+"prod-v2-")
	require.True(t, strings.HasSuffix(r.stdout, fmt.Sprintf("migrated %s to schema version %d\n", prod, queue.SchemaVersion())), r.stdout)

	// The snapshot was taken before the upgrade: schema version 2, every
	// task, and it verifies.
	entries, err := os.ReadDir(snaps)
	require.NoError(t, err)
	require.Len(t, entries, 2, "one snapshot and its manifest")
	snap := filepath.Join(snaps, entries[0].Name())
	require.Equal(t, queue.ManifestPath(snap), filepath.Join(snaps, entries[1].Name()))
	v, err := queue.VerifySnapshot(context.Background(), snap)
	require.NoError(t, err)
	require.Equal(t, 2, v.Manifest.SchemaVersion)
	require.Equal(t, int64(len(tasksBefore)), v.Manifest.Tasks)
	require.Equal(t, tasksBefore, taskRows(t, snap))

	// The database is current, keeps every task, and says who migrated it.
	require.Equal(t, tasksBefore, taskRows(t, prod), "every task survives the migration")
	applied, pending, err := queue.Inspect(context.Background(), prod)
	require.NoError(t, err)
	require.Empty(t, pending)
	require.Len(t, applied, queue.SchemaVersion())
	events := auditLines(t, prod, "--actor", "olga")
	require.Len(t, events, 1)
	require.Equal(t, model.EventMigrated, events[0].Kind)
	require.Equal(t, model.ScopeOperate, events[0].Scope)
	require.Equal(t, "olga", events[0].Actor)
	require.Contains(t, events[0].Detail, fmt.Sprintf("schema 2 -> %d", queue.SchemaVersion()))
	require.Contains(t, events[0].Detail, entries[0].Name())
	requireOK(t, lh(t, "list", "--db", prod))

	// Nothing left to do: no second snapshot, no second event.
	r = lh(t, "migrate", "--db", prod, "--snapshot-dir", snaps, "--actor", "olga")
	requireOK(t, r)
	require.True(t, strings.HasSuffix(r.stdout, "nothing to do\n"), r.stdout)
	entries, err = os.ReadDir(snaps)
	require.NoError(t, err)
	require.Len(t, entries, 2)
	require.Len(t, auditLines(t, prod, "--actor", "olga"), 1)

	// Without --snapshot-dir the snapshot goes next to the database.
	other := filepath.Join(f.dir, "other.db")
	copyFixture(t, other)
	r = lh(t, "migrate", "--db", other, "--actor", "olga", "--json")
	requireOK(t, r)
	var done migrateRecord
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &done), r.stdout)
	require.Equal(t, queue.SchemaVersion(), done.MigratedTo)
	require.False(t, done.DryRun)
	require.FileExists(t, done.Snapshot)
	entries, err = os.ReadDir(filepath.Join(f.dir, "snapshots"))
	require.NoError(t, err)
	require.Len(t, entries, 2, "one snapshot and its manifest")
	require.True(t, strings.HasPrefix(entries[0].Name(), "other-v2-"), entries[0].Name())
}

// A database at a schema version newer than this build's is refused by
// snapshot create, migrate (with or without --dry-run) and audit, and a
// snapshot at one by snapshot verify and restore: exit 1 naming both
// versions, nothing written.
func TestReleaseCommandsRefuseANewerSchema(t *testing.T) {
	f, ids := dataFixture(t)
	snap := filepath.Join(f.dir, "newer-snap.db")
	requireOK(t, f.lh([]string{"snapshot", "create"}, "--out", snap))
	const future = 999
	addFuture := fmt.Sprintf("INSERT INTO schema_migrations (version, name, checksum, applied_at) VALUES (%d, 'future', 'x', 0)", future)
	execSQL(t, f.db, addFuture)
	execSQL(t, snap, addFuture)
	resealManifest(t, snap)

	ours := strconv.Itoa(queue.SchemaVersion())
	commands := [][]string{
		{"snapshot", "create", "--db", f.db, "--out", filepath.Join(f.dir, "s.db")},
		{"snapshot", "verify", snap},
		{"restore", snap, "--to", filepath.Join(f.dir, "r.db"), "--actor", "ops"},
		{"migrate", "--db", f.db, "--actor", "ops", "--snapshot-dir", filepath.Join(f.dir, "snaps")},
		{"migrate", "--db", f.db, "--dry-run"},
		{"audit", "--db", f.db},
		{"audit", "--db", f.db, "--format", "jsonl", "--task", ids[0]},
	}
	before := tree(t, f.dir)
	for _, args := range commands {
		t.Run(strings.Join(args[:2], " "), func(t *testing.T) {
			requireFailed(t, lh(t, args...), strconv.Itoa(future), ours)
			require.Equal(t, before, tree(t, f.dir), "a refused command changed the files")
		})
	}
}

// audit reads the trail, filtered by task, actor and a time window
// ([since, until)), as a table or as JSON lines; bad filter values exit 2
// naming the flag and change nothing.
func TestAuditFilters(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := clockwork.NewFakeClockAt(t0)
	q, err := queue.Open(ctx, queue.Options{Path: f.db, Clock: clock, IDs: randomid.Source{}})
	require.NoError(t, err)
	submit := func(user, key string) string {
		res, err := q.Submit(model.WithScope(ctx, model.ScopeSubmit), model.SubmitRequest{User: user, Key: key,
			Payload: onePayload, CostBudget: 10, StepsMax: 5})
		require.NoError(t, err)
		return res.TaskID
	}
	a := submit("ana", "k1") // t0
	clock.Advance(time.Hour)
	_, err = q.Cancel(model.WithScope(ctx, model.ScopeSubmit), a, "alice") // t0+1h
	require.NoError(t, err)
	clock.Advance(time.Hour)
	b := submit("bo", "k1") // t0+2h
	clock.Advance(time.Hour)
	limits, _, err := q.Limits(ctx)
	require.NoError(t, err)
	limits.DepthMax = 50
	require.NoError(t, q.SetLimits(model.WithScope(ctx, model.ScopeOperate), limits, "olga")) // t0+3h
	require.NoError(t, q.Close())

	at := func(h int) string { return t0.Add(time.Duration(h) * time.Hour).Format(time.RFC3339) }
	kinds := func(events []wire.Event) []string {
		var out []string
		for _, e := range events {
			out = append(out, string(e.Kind)+" "+e.TaskID+" "+e.Actor+" "+e.Scope+" "+e.At.String())
		}
		return out
	}
	all := auditLines(t, f.db)
	require.Equal(t, []string{
		"submitted " + a + " ana submit " + at(0),
		"cancelled " + a + " alice submit " + at(1),
		"submitted " + b + " bo submit " + at(2),
		"limits_set  olga operate " + at(3),
	}, kinds(all))
	for i := 1; i < len(all); i++ {
		require.Greater(t, all[i].Seq, all[i-1].Seq, "in order")
	}
	require.Equal(t, kinds(all[:2]), kinds(auditLines(t, f.db, "--task", a)))
	require.Equal(t, kinds(all[2:3]), kinds(auditLines(t, f.db, "--task", b)))
	require.Equal(t, kinds(all[1:2]), kinds(auditLines(t, f.db, "--actor", "alice")))
	require.Equal(t, kinds(all[3:]), kinds(auditLines(t, f.db, "--actor", "olga")))
	require.Empty(t, auditLines(t, f.db, "--actor", "nobody"))
	require.Empty(t, auditLines(t, f.db, "--task", testkit.UnknownTask))
	require.Equal(t, kinds(all[1:]), kinds(auditLines(t, f.db, "--since", at(1))), "since is inclusive")
	require.Equal(t, kinds(all[:2]), kinds(auditLines(t, f.db, "--until", at(2))), "until is exclusive")
	require.Equal(t, kinds(all[1:3]), kinds(auditLines(t, f.db, "--since", at(1), "--until", t0.Add(2*time.Hour+time.Millisecond).Format(time.RFC3339Nano))))
	require.Equal(t, kinds(all[1:2]), kinds(auditLines(t, f.db, "--task", a, "--actor", "alice", "--since", at(1))))
	require.Empty(t, auditLines(t, f.db, "--since", "+1h"), "nothing in the future")
	require.Equal(t, kinds(all[:1]), kinds(auditLines(t, f.db, "--limit", "1")))

	// --json prints JSON lines too; the table prints one line per event
	// with the actor and the scope.
	r := f.do("audit", "--json", "--actor", "bo")
	requireOK(t, r)
	require.Equal(t, 1, strings.Count(r.stdout, "\n"))
	var rec map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rec))
	for _, field := range []string{"seq", "task_id", "kind", "attempt", "fence", "op_id", "from", "to", "reason", "actor", "at", "detail", "scope"} {
		require.Contains(t, rec, field)
	}
	r = f.do("audit")
	requireOK(t, r)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	require.Len(t, lines, 4, r.stdout)
	require.Contains(t, lines[1], "cancelled")
	require.Contains(t, lines[1], "task="+a)
	require.Contains(t, lines[1], "actor=alice scope=submit")
	require.Contains(t, lines[1], " "+t0.Add(time.Hour).Format(stampLayout)+" ", "times have a fixed millisecond width")
	require.Contains(t, lines[3], "limits_set")
	require.Contains(t, lines[3], "actor=olga scope=operate")
	r = f.do("audit", "--format", "table", "--task", b)
	requireOK(t, r)
	require.Equal(t, 1, strings.Count(r.stdout, "\n"), r.stdout)

	bad := []struct {
		name string
		args []string
		want []string
	}{
		{"task not an ID", []string{"--task", "nope"}, []string{"task", "nope"}},
		{"task with a quote", []string{"--task", "t_0' OR '1'='1"}, []string{"task"}},
		{"actor with a space", []string{"--actor", "a b"}, []string{"actor"}},
		{"actor with a slash", []string{"--actor", "../etc"}, []string{"actor"}},
		{"actor too long", []string{"--actor", strings.Repeat("a", 200)}, []string{"actor"}},
		{"since not a time", []string{"--since", "yesterday"}, []string{"--since", "yesterday"}},
		{"since a negative duration", []string{"--since", "+-1h"}, []string{"--since"}},
		{"until not a time", []string{"--until", "2025-13-01T00:00:00Z"}, []string{"--until"}},
		{"until a date only", []string{"--until", "2025-01-01"}, []string{"--until"}},
		{"until before since", []string{"--since", at(2), "--until", at(1)}, []string{"--until", "after --since"}},
		{"until equal to since", []string{"--since", at(2), "--until", at(2)}, []string{"--until", "after --since"}},
		{"format unknown", []string{"--format", "xml"}, []string{"--format", "xml"}},
		{"format empty", []string{"--format", ""}, []string{"--format"}},
		{"limit zero", []string{"--limit", "0"}, []string{"--limit"}},
		{"limit too large", []string{"--limit", strconv.Itoa(model.ListLimitMax + 1)}, []string{"--limit"}},
		{"limit not a number", []string{"--limit", "all"}, []string{"limit"}},
		{"unknown flag", []string{"--bogus"}, []string{"bogus"}},
		{"unexpected argument", []string{"extra"}, []string{"extra"}},
		{"empty db path", []string{"--db", ""}, []string{"--db"}},
	}
	before := snapshot(t, f.dir)
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			requireUsage(t, f.do("audit", c.args...), c.want...)
			require.Equal(t, before, snapshot(t, f.dir))
		})
	}
	// A missing database is bad usage, and is not created.
	missing := newMissing(t)
	requireUsage(t, missing.do("audit"), "no database at", "leasehold.db")
	require.Empty(t, snapshot(t, missing.dir))
}

// Through the CLI each acting command records its actor and the scope a
// token would need for the same action: submit and cancel under submit,
// approve and reject under approve, requeue, resolve, settle, limits and
// schedules under operate. A worker's own writes carry no scope.
func TestCLIRecordsActorAndScope(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cancelled := f.submit("ana", "k-cancel", onePayload)
	requireOK(t, f.do("cancel", cancelled, "--actor", "carla"))
	// Each of these claims the one urgent queued task: drive them all
	// before any is approved or requeued.
	approved, version := f.toApproval("k-approve")
	rejected, rejectVersion := f.toApproval("k-reject")
	requeued, op := f.toReview("k-requeue")
	resolved, _ := f.toReview("k-resolve")
	requireOK(t, f.do("approve", approved, "--version", strconv.FormatInt(version, 10), "--actor", "boss"))
	requireOK(t, f.do("reject", rejected, "--version", strconv.FormatInt(rejectVersion, 10), "--actor", "boss2"))
	requireOK(t, f.do("settle", op, "--not-applied", "--actor", "ops-settle"))
	requireOK(t, f.do("requeue", requeued, "--grant-cost", "5", "--grant-steps", "1", "--actor", "ops-requeue"))
	requireOK(t, f.do("resolve", resolved, "--as", "failed", "--actor", "ops-resolve"))
	requireOK(t, f.do("limits", "--depth-max", "50", "--actor", "ops-limits"))
	requireOK(t, f.do("limits", "--user", "ana", "--running-max", "3", "--actor", "ops-limits"))
	r := f.lh([]string{"schedule", "add"}, "--user", "ana", "--payload", onePayload, "--cost-budget", "5", "--steps-max", "2",
		"--origin", "2030-01-01T00:00:00Z", "--period", "1h", "--actor", "ops-schedule")
	requireOK(t, r)
	requireOK(t, f.lh([]string{"schedule", "remove"}, strings.TrimSpace(r.stdout), "--actor", "ops-schedule"))

	want := map[string][]string{ // actor: "kind scope task" of each of its events
		"carla":        {"cancelled submit " + cancelled},
		"boss":         {"approved approve " + approved},
		"boss2":        {"rejected approve " + rejected},
		"ops-settle":   {"effect_settled operate " + requeued},
		"ops-requeue":  {"requeued operate " + requeued},
		"ops-resolve":  {"resolved operate " + resolved},
		"ops-limits":   {"limits_set operate ", "limits_set operate "},
		"ops-schedule": {"schedule_added operate ", "schedule_removed operate "},
	}
	for actor, events := range want {
		var got []string
		for _, e := range auditLines(t, f.db, "--actor", actor) {
			require.Equal(t, actor, e.Actor)
			got = append(got, string(e.Kind)+" "+e.Scope+" "+e.TaskID)
		}
		require.Equal(t, events, got, "the events of %s", actor)
	}

	// Submits carry the submit scope; the claims the tests made through
	// package queue (as a worker does) carry none.
	for _, e := range auditLines(t, f.db) {
		switch e.Kind {
		case model.EventSubmitted:
			require.Equal(t, model.ScopeSubmit, e.Scope, "%+v", e)
		case model.EventClaimed, model.EventPaused, model.EventEffectIntent, model.EventUncertain:
			require.Empty(t, e.Scope, "%+v", e)
			require.Equal(t, "w1", e.Actor, "%+v", e)
		}
	}
}

// sim --report writes the run's report: the fingerprints and verdicts the
// run printed, labelled fixture, with a timeline, in all three formats.
func TestSimReport(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("LEASEHOLD_DATA_DIR", dir)
	out := filepath.Join(dir, "reports", "late")
	r := lh(t, "sim", "--scenario", "late-result", "--seed", "4", "--seeds", "12", "--parallel", "1", "--report", out, "--json")
	requireOK(t, r)
	printed, err := readSeedRecords([]byte(r.stdout))
	require.NoError(t, err)
	require.Len(t, printed, 12)

	b, err := os.ReadFile(filepath.Join(out, "report.json"))
	require.NoError(t, err)
	var rep reports.Report
	require.NoError(t, json.Unmarshal(b, &rep))
	require.NoError(t, rep.Validate())
	require.True(t, rep.Pass)
	require.Len(t, rep.Fixture.Sweeps, 1)
	sw := rep.Fixture.Sweeps[0]
	require.Equal(t, "late-result", sw.Scenario)
	require.Equal(t, uint64(4), sw.From)
	require.Equal(t, 12, sw.Passed)
	require.Zero(t, sw.Failed)
	require.Len(t, sw.Fingerprints, 10, "the first 10 seeds (none failed)")
	for i, fp := range sw.Fingerprints {
		require.Equal(t, printed[i].Seed, fp.Seed)
		require.Equal(t, printed[i].Fingerprint, fp.Fingerprint, "the report lists what the run printed")
	}
	require.Empty(t, rep.Live.Sweeps)
	require.Empty(t, rep.Live.Outcomes)
	require.Len(t, rep.Fixture.Timelines, 1)
	require.Contains(t, rep.Fixture.Timelines[0].Caption, printed[0].Fingerprint)
	require.NotNil(t, printed[0].Timeline, "the first seed's record carries the timeline the report draws")
	require.Nil(t, printed[1].Timeline, "a later passing seed's record does not")
	require.Equal(t, evidence.SimTimeline(rep.Fixture.Timelines[0].Title, printed[0].Timeline.Entries, printed[0].Timeline.Workers).Bars,
		rep.Fixture.Timelines[0].Bars, "the report draws the printed record's timeline")
	require.Len(t, rep.Checks, 1)
	require.Equal(t, reports.Fixture, rep.Checks[0].Results[0].Kind)

	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	require.NoError(t, err)
	require.Contains(t, string(md), "# leasehold sim: late-result, seeds 4..15")
	require.Contains(t, string(md), "### Coverage: late-result (12 seeds)")
	require.Contains(t, string(md), "`transition queued -claimed-> running` | 12 |")
	page, err := os.ReadFile(filepath.Join(out, "index.html"))
	require.NoError(t, err)
	require.Contains(t, string(page), "<svg")
	// The report says which fingerprints it lists, and both renderings
	// show every one of them.
	require.Contains(t, strings.Join(rep.Fixture.About, " "), "Listed fingerprints: the first 10 seeds and every failed seed")
	for _, fp := range sw.Fingerprints {
		require.Contains(t, string(md), fmt.Sprintf("%d: `%s`", fp.Seed, fp.Fingerprint[:12]))
		require.Contains(t, string(page), fmt.Sprintf(`<code title="%s">`, fp.Fingerprint))
	}
}

// A report file that is a symbolic link (here to a file outside) is
// replaced by the new report, never written through: the file outside
// keeps its bytes, and no temporary file is left beside the reports.
func TestSimReportReplacesALinkNotItsTarget(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("LEASEHOLD_DATA_DIR", dir)
	out := filepath.Join(dir, "reports")
	require.NoError(t, os.MkdirAll(out, 0o755))
	victim := filepath.Join(t.TempDir(), "victim.html")
	require.NoError(t, os.WriteFile(victim, []byte("an operator's page"), 0o600))
	for _, name := range []string{"index.html", "report.json", "report.md"} {
		require.NoError(t, os.Symlink(victim, filepath.Join(out, name)))
	}
	requireOK(t, lh(t, "sim", "--scenario", "late-result", "--seed", "4", "--seeds", "1", "--parallel", "1", "--report", out))
	b, err := os.ReadFile(victim)
	require.NoError(t, err)
	require.Equal(t, "an operator's page", string(b), "the link's target is untouched")
	entries, err := os.ReadDir(out)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		require.True(t, e.Type().IsRegular(), "%s is a file of its own now", e.Name())
	}
	require.ElementsMatch(t, []string{"index.html", "report.json", "report.md"}, names, "no temporary file is left")
	info, err := os.Stat(filepath.Join(out, "index.html"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o644), info.Mode().Perm())
}

// sim --json prints one record a seed and a summary record, which
// readSeedRecords reads back; a line that is not a record is an error.
func TestSimJSONRecords(t *testing.T) {
	r := lh(t, "sim", "--scenario", "late-result", "--seed", "2", "--seeds", "3", "--parallel", "1", "--json")
	requireOK(t, r)
	recs, err := readSeedRecords([]byte(r.stdout))
	require.NoError(t, err)
	require.Len(t, recs, 3)
	for i, rec := range recs {
		require.Equal(t, uint64(2+i), rec.Seed)
		require.True(t, rec.Pass)
		require.Len(t, rec.Fingerprint, 64)
		require.Equal(t, 1, rec.Coverage.Seeds)
		require.NotEmpty(t, rec.Coverage.Cells)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 4)
	var sum evidence.SummaryRecord
	require.NoError(t, json.Unmarshal([]byte(lines[3]), &sum))
	require.Equal(t, evidence.RecordSummary, sum.Record)
	require.Equal(t, 3, sum.Passed)
	require.Equal(t, 3, sum.Coverage.Seeds)
	require.False(t, sum.CoverageEnforced, "3 seeds report coverage but are not held to it")
	require.True(t, sum.Pass)

	_, err = readSeedRecords([]byte(lines[0] + "\nseed: 7\n"))
	require.ErrorContains(t, err, "line 2 is not a record")

	// --check-determinism and --trace go into the record.
	r = lh(t, "sim", "--scenario", "late-result", "--seed", "2", "--check-determinism", "--trace", "--json")
	requireOK(t, r)
	recs, sums, err := evidence.ReadRecords([]byte(r.stdout))
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Len(t, sums, 1)
	require.NotNil(t, recs[0].Deterministic)
	require.True(t, *recs[0].Deterministic)
	require.NotEmpty(t, recs[0].Trace)
	require.Nil(t, recs[0].Shrunk, "a passing seed has nothing to shrink")
	text := lh(t, "sim", "--scenario", "late-result", "--seed", "2", "--trace")
	requireOK(t, text)
	require.True(t, strings.HasPrefix(text.stdout, strings.Join(recs[0].Trace, "\n")+"\nseed: 2\n"), "the text prints the same trace")
}

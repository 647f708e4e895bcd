package cli

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

func init() {
	register("snapshot", "consistent copies of a live database: snapshot create --out FILE | snapshot verify FILE", runSnapshot)
	register("restore", "restore a verified snapshot to a new database file: restore FILE --to PATH", runRestore)
	register("migrate", "apply pending schema migrations after a verified snapshot, or make the database where there is none (the one command that does): migrate [--dry-run]", runMigrate)
}

// allowedRoot is the directory snapshot, restore and migrate may read and
// write in: LEASEHOLD_DATA_DIR, or the working directory.
func allowedRoot() (string, error) {
	root := os.Getenv("LEASEHOLD_DATA_DIR")
	if root == "" {
		var err error
		if root, err = os.Getwd(); err != nil {
			return "", err
		}
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(root)
}

// pathLabel is how errors name where a path came from: a flag by its name
// ("db" is --db), a positional argument by its upper-case name
// ("SNAPSHOT").
func pathLabel(field string) string {
	if field == strings.ToUpper(field) {
		return field
	}
	return "--" + field
}

// safePath resolves p and refuses it unless it lies inside the allowed
// directory (after following symbolic links in its parent).
func safePath(field, p string) (string, error) {
	label := pathLabel(field)
	if strings.TrimSpace(p) == "" {
		return "", badUsage("%s: path required", label)
	}
	if strings.ContainsAny(p, "\x00?#") {
		return "", badUsage("%s: %s has characters a database path may not", label, model.Quote(p, 64))
	}
	root, err := allowedRoot()
	if err != nil {
		return "", err
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", badUsage("%s: %v", label, err)
	}
	parent, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return "", badUsage("%s: directory of %s: %v", label, p, err)
	}
	resolved := filepath.Join(parent, filepath.Base(abs))
	if fi, err := os.Lstat(resolved); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		return "", badUsage("%s: %s is a symbolic link", label, p)
	}
	if err := inside(field, p, root, resolved); err != nil {
		return "", err
	}
	return resolved, nil
}

// inside refuses resolved (what the flag's value p resolved to) unless it
// lies in root.
func inside(field, p, root, resolved string) error {
	rel, err := filepath.Rel(root, resolved)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return badUsage("%s: %s is outside the allowed directory %s (set LEASEHOLD_DATA_DIR)", pathLabel(field), p, root)
	}
	return nil
}

// notTheDatabase refuses an output path that is a database file or one of
// its companions.
func notTheDatabase(field, out, db string) error {
	dbAbs, err := filepath.Abs(db)
	if err != nil {
		return err
	}
	if parent, err := filepath.EvalSymlinks(filepath.Dir(dbAbs)); err == nil {
		dbAbs = filepath.Join(parent, filepath.Base(dbAbs))
	}
	for _, p := range []string{dbAbs, dbAbs + "-wal", dbAbs + "-shm", dbAbs + "-journal"} {
		if out == p {
			return badUsage("%s: %s is the database itself", pathLabel(field), out)
		}
	}
	return nil
}

func runSnapshot(e *env, args []string) int {
	sub, args, err := dispatch("snapshot", args)
	if err != nil {
		return fail(e, "snapshot", err)
	}
	fs := flag.NewFlagSet("snapshot "+sub, flag.ContinueOnError)
	switch sub {
	case "create":
		// Not commonFlags: the snapshot is read through a connection of its
		// own (queue.CreateSnapshot), which --busy-timeout and --synchronous
		// could not reach, so they are not offered.
		dbFlag := dbFlagVar(fs)
		asJSON := fs.Bool("json", false, "print the manifest as JSON")
		out := fs.String("out", "", "the snapshot file to write (its manifest goes to FILE.manifest.json)")
		if err := parse(fs, args); err != nil {
			return fail(e, "snapshot", err)
		}
		if err := refusePostgres("snapshot", "db", *dbFlag); err != nil {
			return fail(e, "snapshot", err)
		}
		db, err := safePath("db", *dbFlag)
		if err == nil {
			_, err = os.Stat(db)
		}
		var target string
		if err == nil {
			target, err = safePath("out", *out)
		}
		if err == nil {
			err = notTheDatabase("out", target, db)
		}
		if err != nil {
			return fail(e, "snapshot", err)
		}
		m, err := queue.CreateSnapshot(e.ctx, db, target, time.Now())
		if err != nil {
			return fail(e, "snapshot", err)
		}
		if *asJSON {
			printJSON(e.stdout, m)
			return exitOK
		}
		fmt.Fprintf(e.stdout, "snapshot %s: schema version %d, %d tasks %v, %d events, sha256 %s\nmanifest %s\n",
			target, m.SchemaVersion, m.Tasks, m.States, m.Events, m.SHA256, queue.ManifestPath(target))
		return exitOK
	case "verify":
		asJSON := fs.Bool("json", false, "print the verification as JSON")
		if err := parseWithArgs(fs, args, 1); err != nil {
			return fail(e, "snapshot", err)
		}
		file, err := safePath("SNAPSHOT", fs.Arg(0))
		if err != nil {
			return fail(e, "snapshot", err)
		}
		v, err := queue.VerifySnapshot(e.ctx, file)
		if err != nil {
			return fail(e, "snapshot", fmt.Errorf("refused: %w", err))
		}
		if *asJSON {
			printJSON(e.stdout, v)
			return exitOK
		}
		fmt.Fprintf(e.stdout, "snapshot %s verified:\n", file)
		for _, c := range v.Checks {
			fmt.Fprintf(e.stdout, "  ok %s\n", c)
		}
		return exitOK
	}
	return fail(e, "snapshot", badUsage("unknown snapshot command %q (want create or verify)", sub))
}

func runRestore(e *env, args []string) int {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	to := fs.String("to", "", "the new database file (must not exist)")
	actor := fs.String("actor", defaultActor(), "who restores (recorded in the restored database's audit trail)")
	if err := parseWithArgs(fs, args, 1); err != nil {
		return fail(e, "restore", err)
	}
	if err := refusePostgres("restore", "to", *to); err != nil {
		return fail(e, "restore", err)
	}
	file, err := safePath("SNAPSHOT", fs.Arg(0))
	var target string
	if err == nil {
		target, err = safePath("to", *to)
	}
	if err == nil {
		err = model.CheckName("actor", *actor)
	}
	if err != nil {
		return fail(e, "restore", err)
	}
	v, err := queue.Restore(e.ctx, file, target)
	if err != nil {
		return fail(e, "restore", err)
	}
	// Record the restore in the restored database's own audit trail.
	q, err := openExisting(e.ctx, commonFor(target))
	if err == nil {
		err = q.RecordOperatorEvent(e.ctx, model.EventRestored, *actor,
			fmt.Sprintf("restored from snapshot sha256 %s (%d tasks)", v.Manifest.SHA256, v.Manifest.Tasks))
		q.Close()
	}
	if err != nil && !errors.Is(err, queue.ErrSchemaOutdated) {
		return fail(e, "restore", err)
	}
	fmt.Fprintf(e.stdout, "restored %s to %s after verifying it:\n", file, target)
	for _, c := range v.Checks {
		fmt.Fprintf(e.stdout, "  ok %s\n", c)
	}
	if err != nil {
		fmt.Fprintf(e.stdout, "the restored database is at schema version %d: run leasehold migrate --db %s (the restore is recorded in its audit trail once it is current)\n",
			v.Manifest.SchemaVersion, target)
	}
	return exitOK
}

func runMigrate(e *env, args []string) int {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	c := commonFlags(fs, true)
	dryRun := fs.Bool("dry-run", false, "show the plan and change nothing")
	snapshots := fs.String("snapshot-dir", "", "where the pre-migration snapshot goes (default: snapshots next to the database)")
	if err := parse(fs, args); err != nil {
		return fail(e, "migrate", err)
	}
	if _, err := c.location(); err != nil {
		return fail(e, "migrate", err)
	}
	if c.onPostgres() {
		return runMigratePostgres(e, c, *dryRun)
	}
	db, dir, err := migrateFile(c, *dryRun, *snapshots)
	if err != nil {
		return fail(e, "migrate", err)
	}
	if none, err := noFile(db); err != nil {
		return fail(e, "migrate", err)
	} else if none {
		return createDatabase(e, c.withDB(db), *dryRun)
	}
	rec, err := migratePlan(e, c, db, db, *dryRun)
	if err != nil {
		return fail(e, "migrate", err)
	}
	if len(rec.Pending) > 0 && !*dryRun {
		if err := migrate(e, c.withDB(db), dir, *c.actor, &rec); err != nil {
			return fail(e, "migrate", err)
		}
	}
	return migrateDone(e, c, rec, fmt.Sprintf("verified snapshot %s\nmigrated %s to schema version %d", rec.Snapshot, db, rec.MigratedTo))
}

// createDatabase is migrate where --db names no database yet (no file,
// or an empty one): it makes the
// database at this build's schema (there is nothing to snapshot), and
// says so, so that a mistyped path is seen for the new file it is.
// Every other command refuses a missing database (openExisting).
func createDatabase(e *env, c common, dryRun bool) int {
	db := *c.db
	all, err := queue.Migrations()
	if err != nil {
		return fail(e, "migrate", err)
	}
	rec := migrateRecord{Database: db, Pending: []pendingMigration{}, DryRun: dryRun, Created: !dryRun}
	for _, m := range all {
		rec.Pending = append(rec.Pending, pendingMigration{Name: m.Name, SHA256: m.Checksum})
		rec.Build = m.Version
	}
	if !*c.json {
		fmt.Fprintf(e.stdout, "database %s: none yet (migrate makes it); this build: schema version %d\n", db, rec.Build)
	}
	if !dryRun {
		q, err := openQueue(e.ctx, c, queue.MigrateNew)
		if err != nil {
			return fail(e, "migrate", err)
		}
		err = q.RecordOperatorEvent(e.ctx, model.EventMigrated, *c.actor, fmt.Sprintf("new database at schema %d", rec.Build))
		q.Close()
		if err != nil {
			return fail(e, "migrate", err)
		}
		rec.MigratedTo = rec.Build
	}
	return migrateDone(e, c, rec, fmt.Sprintf("created %s at schema version %d", db, rec.MigratedTo))
}

// migrateFile checks migrate's flags for a SQLite file before anything is
// read: --busy-timeout and --synchronous (they apply to the migration's
// own connection; the snapshot and its verification open theirs at the
// queue's defaults), --db, --actor and, unless it is a dry run, the
// snapshot directory (default: snapshots beside the database). It returns
// the database's and the directory's resolved paths.
func migrateFile(c common, dryRun bool, snapshots string) (db, dir string, err error) {
	if _, _, err := c.settings(); err != nil {
		return "", "", err
	}
	if db, err = safePath("db", *c.db); err != nil {
		return "", "", err
	}
	if err := model.CheckName("actor", *c.actor); err != nil {
		return "", "", err
	}
	if dryRun {
		return db, "", nil
	}
	if snapshots == "" {
		snapshots = filepath.Join(filepath.Dir(db), "snapshots")
	}
	dir, err = safePath("snapshot-dir", snapshots)
	return db, dir, err
}

// refusePostgres refuses a command that works on SQLite files only when
// its flag's value db names a PostgreSQL database, naming PostgreSQL's
// own tools, and a value that names no store (worded without any password
// it holds) before anything prints it as a path. An empty value is left
// to the path's own check.
func refusePostgres(command, flagName, db string) error {
	if strings.TrimSpace(db) == "" {
		return nil
	}
	loc, err := queue.ParseLocation(db)
	if err != nil {
		msg := strings.TrimSuffix(err.Error(), ": "+queue.ErrBadLocation.Error())
		return badUsage("--%s%s", flagName, strings.TrimPrefix(msg, "--db"))
	}
	if loc.Kind != queue.StorePostgres {
		return nil
	}
	return badUsage("%s is a PostgreSQL database, which %s does not take: back it up with pg_dump and restore it with pg_restore", loc, command)
}

// runMigratePostgres is migrate for a PostgreSQL database: the plan, and
// the migrations applied in one transaction (PostgreSQL's DDL is
// transactional: a failed migration leaves the schema as it was). It takes
// no snapshot: that is pg_dump's job, before running it.
func runMigratePostgres(e *env, c common, dryRun bool) int {
	loc, err := c.location()
	if err == nil {
		err = model.CheckName("actor", *c.actor)
	}
	if err != nil {
		return fail(e, "migrate", err)
	}
	rec, err := migratePlan(e, c, loc.URL, loc.String(), dryRun)
	if err != nil {
		return fail(e, "migrate", explainOpen(loc.String(), err))
	}
	if len(rec.Pending) > 0 && !dryRun {
		q, err := openQueue(e.ctx, c, queue.MigrateAll)
		if err != nil {
			return fail(e, "migrate", err)
		}
		err = q.RecordOperatorEvent(e.ctx, model.EventMigrated, *c.actor,
			fmt.Sprintf("schema %d -> %d (postgres; no snapshot: pg_dump is the operator's)", rec.From, rec.Build))
		q.Close()
		if err != nil {
			return fail(e, "migrate", err)
		}
		rec.MigratedTo = rec.Build
	}
	return migrateDone(e, c, rec, fmt.Sprintf("migrated %s to schema version %d", rec.Database, rec.MigratedTo))
}

// migratePlan reads the plan of the database at path (printed as name):
// its schema version and the migrations this build would apply. Unless
// --json is set it prints the plan first, so that a failed migration
// follows it.
func migratePlan(e *env, c common, path, name string, dryRun bool) (migrateRecord, error) {
	applied, pending, err := queue.Inspect(e.ctx, path)
	if err != nil {
		return migrateRecord{}, err
	}
	rec := migrateRecord{Database: name, Pending: []pendingMigration{}, DryRun: dryRun}
	if len(applied) > 0 {
		rec.From = applied[len(applied)-1].Version
	}
	rec.Build = rec.From
	for _, m := range pending {
		rec.Pending = append(rec.Pending, pendingMigration{Name: m.Name, SHA256: m.Checksum})
		rec.Build = m.Version
	}
	if !*c.json {
		fmt.Fprintf(e.stdout, "database %s: schema version %d; this build: %d\n", rec.Database, rec.From, rec.Build)
		for _, m := range rec.Pending {
			fmt.Fprintf(e.stdout, "  pending %s (sha256 %s)\n", m.Name, m.SHA256[:16])
		}
	}
	return rec, nil
}

// migrateDone prints what migrate did: its record with --json, or a line
// (migrated, the text's, when it applied migrations).
func migrateDone(e *env, c common, rec migrateRecord, migrated string) int {
	if *c.json {
		if err := printJSON(e.stdout, rec); err != nil {
			return fail(e, "migrate", err)
		}
		return exitOK
	}
	switch {
	case len(rec.Pending) == 0:
		fmt.Fprintln(e.stdout, "nothing to do")
	case rec.DryRun:
		fmt.Fprintln(e.stdout, "dry run: nothing changed")
	default:
		fmt.Fprintln(e.stdout, migrated)
	}
	return exitOK
}

// migrateRecord is what migrate did, as --json prints it.
type migrateRecord struct {
	Database   string             `json:"database"`
	From       int                `json:"schema_version"`       // the database's, before
	Build      int                `json:"build_schema_version"` // this build's
	Pending    []pendingMigration `json:"pending"`
	DryRun     bool               `json:"dry_run"`
	Snapshot   string             `json:"snapshot,omitempty"`    // the verified pre-migration snapshot
	MigratedTo int                `json:"migrated_to,omitempty"` // the schema version after, when it migrated
	Created    bool               `json:"created,omitempty"`     // there was no database: migrate made it
}

// pendingMigration is one migration the database has not applied.
type pendingMigration struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256"`
}

// migrate snapshots the database c names into dir, verifies the
// snapshot, applies the pending migrations and records the migration in
// the audit trail, filling in rec.
func migrate(e *env, c common, dir, actor string, rec *migrateRecord) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	db := *c.db
	snap := filepath.Join(dir, fmt.Sprintf("%s-v%d-%s.db", strings.TrimSuffix(filepath.Base(db), filepath.Ext(db)), rec.From, time.Now().UTC().Format("20060102T150405Z")))
	if _, err := queue.CreateSnapshot(e.ctx, db, snap, time.Now()); err != nil {
		return fmt.Errorf("snapshot before migrating: %w", err)
	}
	if _, err := queue.VerifySnapshot(e.ctx, snap); err != nil {
		return fmt.Errorf("the pre-migration snapshot failed verification, nothing migrated: %w", err)
	}
	rec.Snapshot = snap
	q, err := openQueue(e.ctx, c, queue.MigrateAll)
	if err != nil {
		return fmt.Errorf("migrate (restore %s if needed): %w", snap, err)
	}
	defer q.Close()
	if err := q.RecordOperatorEvent(e.ctx, model.EventMigrated, actor,
		fmt.Sprintf("schema %d -> %d; snapshot %s", rec.From, rec.Build, filepath.Base(snap))); err != nil {
		return err
	}
	rec.MigratedTo = rec.Build
	return nil
}

package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue/internal/postgres"
	"github.com/leasehold/leasehold/queue/internal/seam"
)

// AppliedMigration is a row of schema_migrations.
type AppliedMigration = seam.AppliedMigration

// querier is a *sql.DB or a *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// readApplied returns the migrations recorded in db, in order.
func readApplied(ctx context.Context, db querier, set *sqlSet) ([]AppliedMigration, error) {
	var exists int
	err := db.QueryRowContext(ctx, set.queries[qMigrationsTableExists.String()].text).Scan(&exists)
	if err != nil {
		return nil, fmt.Errorf("queue: read schema version: %w", err)
	}
	if exists == 0 {
		return nil, nil
	}
	rows, err := db.QueryContext(ctx, set.queries[qMigrationsApplied.String()].text)
	if err != nil {
		return nil, fmt.Errorf("queue: read schema version: %w", err)
	}
	defer rows.Close()
	var out []AppliedMigration
	for rows.Next() {
		var a AppliedMigration
		if err := rows.Scan(&a.Version, &a.Name, &a.Checksum); err != nil {
			return nil, fmt.Errorf("queue: read schema version: %w", err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// Inspect returns the migrations the database at path (a SQLite file, or
// a URL another store handles, such as postgres://) has applied and the
// ones this build would apply, reading without changing anything. It
// refuses a database that is newer than this build or whose applied
// migrations differ from this build's. Where the store has a functions
// file and the database's functions are not this build's, pending ends
// with an entry for it, named functions.sql@vN, numbered as the build's
// last migration. A database at a folded history (fold.go) has that
// history applied, and the baseline pending.
func Inspect(ctx context.Context, path string) (applied []AppliedMigration, pending []Migration, err error) {
	b := backendFor(path)
	if b.Capabilities().LocalFile {
		return inspectFile(ctx, path)
	}
	set, err := sqlOf(b)
	if err != nil {
		return nil, nil, err
	}
	pool, err := b.Connect(ctx, seam.ConnectParams{Path: path, ReadOnly: true, MaxConns: 1})
	if err != nil {
		return nil, nil, err
	}
	db := pool.DB
	defer db.Close()
	p, err := plan(ctx, db, set)
	if err != nil {
		return nil, nil, err
	}
	return p.applied, p.listed(), nil
}

// planFile is plan for a SQLite database opened raw (snapshots, Inspect).
func planFile(ctx context.Context, db *sql.DB) (applied []AppliedMigration, pending []Migration, err error) {
	set, err := sqlOf(backends[0])
	if err != nil {
		return nil, nil, err
	}
	p, err := plan(ctx, db, set)
	if err != nil {
		return nil, nil, err
	}
	return p.applied, p.listed(), nil
}

// schemaPlan is what migrating a database would do.
type schemaPlan struct {
	applied []AppliedMigration
	pending []Migration
	// fold: applied is the store's folded history, and the first pending
	// migration (the baseline) is recorded, not run (fold.go).
	fold bool
	// functions is the functions file to install (its text and checksum
	// in installed, installedSum), nil when the database has this build's.
	functions               *storeFunctions
	installed, installedSum string
	functionsFrom           int // the database's functions version, 0 for none
}

// changes reports whether migrating would change anything.
func (p schemaPlan) changes() bool { return len(p.pending) > 0 || p.functions != nil }

// listed is the pending migrations, and the functions file when it is
// to be installed (see Inspect).
func (p schemaPlan) listed() []Migration {
	out := p.pending
	if p.functions != nil {
		last := 0
		if len(p.pending) > 0 {
			last = p.pending[len(p.pending)-1].Version
		} else if len(p.applied) > 0 {
			last = p.applied[len(p.applied)-1].Version
		}
		out = append(slices.Clone(out), Migration{Version: last, Name: fmt.Sprintf("%s@v%d", functionsFile, p.functions.Version),
			SQL: p.installed, Checksum: p.installedSum})
	}
	return out
}

// plan compares the applied migrations and functions db records with
// those of the store whose SQL files are set, and returns what migrating
// would do.
func plan(ctx context.Context, db querier, set *sqlSet) (schemaPlan, error) {
	known := set.migrations
	applied, err := readApplied(ctx, db, set)
	if err != nil {
		return schemaPlan{}, err
	}
	p := schemaPlan{applied: applied}
	switch {
	case foldedMatches(set.folded, applied):
		p.fold, p.pending = true, known
	case foldedPartial(set.folded, applied):
		return schemaPlan{}, refusePartial(set.folded, applied)
	case len(applied) > len(known):
		return schemaPlan{}, fmt.Errorf("queue: database schema version %d, this build supports up to %d: %w",
			applied[len(applied)-1].Version, len(known), ErrSchemaTooNew)
	default:
		for i, a := range applied {
			if a.Version != known[i].Version || a.Checksum != known[i].Checksum {
				return schemaPlan{}, fmt.Errorf("queue: migration %d (%s): %w", a.Version, a.Name, ErrSchemaMismatch)
			}
		}
		p.pending = known[len(applied):]
	}
	if set.functions == nil {
		return p, nil
	}
	if p.installed, p.installedSum, err = set.functions.installed(); err != nil {
		return schemaPlan{}, err
	}
	version, sum, err := readFunctions(ctx, db, set)
	if err != nil {
		return schemaPlan{}, err
	}
	if version > set.functions.Version {
		return schemaPlan{}, fmt.Errorf("queue: database functions version %d, this build's is %d: %w",
			version, set.functions.Version, ErrSchemaTooNew)
	}
	p.functionsFrom = version
	if p.fold || version < set.functions.Version || sum != p.installedSum {
		p.functions = set.functions
	}
	return p, nil
}

// readFunctions returns the version and checksum of the functions db
// records, or 0 and "" when it records none.
func readFunctions(ctx context.Context, db querier, set *sqlSet) (int, string, error) {
	var exists int
	if err := db.QueryRowContext(ctx, set.queries[qFunctionsTableExists.String()].text).Scan(&exists); err != nil {
		return 0, "", fmt.Errorf("queue: read functions version: %w", err)
	}
	if exists == 0 {
		return 0, "", nil
	}
	var version int
	var sum string
	err := db.QueryRowContext(ctx, set.queries[qFunctionsApplied.String()].text).Scan(&version, &sum)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("queue: read functions version: %w", err)
	}
	return version, sum, nil
}

func (q *Queue) migrate(ctx context.Context, mode MigrateMode) error {
	p, err := plan(ctx, q.db, q.sql)
	if err != nil {
		return err
	}
	if !p.changes() {
		return nil
	}
	if len(p.applied) > 0 && mode != MigrateAll {
		return outdated(p)
	}
	return q.applyPending(ctx, mode)
}

// outdated refuses a database that needs migrations, or functions, this
// build has.
func outdated(p schemaPlan) error {
	last := p.applied[len(p.applied)-1].Version
	switch {
	case p.fold:
		return fmt.Errorf("queue: database at pre-release schema version %d, which this build moves onto its baseline: run leasehold migrate: %w",
			last, ErrSchemaOutdated)
	case len(p.pending) > 0:
		return fmt.Errorf("queue: database schema version %d, this build's is %d: %w",
			last, p.pending[len(p.pending)-1].Version, ErrSchemaOutdated)
	}
	return fmt.Errorf("queue: database functions version %d, this build's is %d (or of the same version, other bodies): %w",
		p.functionsFrom, p.functions.Version, ErrSchemaOutdated)
}

// applyPending runs the pending migrations and records them, then
// installs the functions file and records it, all in one write
// transaction that plans again under its lock: another process may have
// migrated the database since the first look (two workers starting on a
// new file, or many machines on a new PostgreSQL schema), and no process
// may see a schema migrated only in part. SQLite's write transaction is
// that lock (BEGIN IMMEDIATE); a store whose transactions take no lock at
// BEGIN (PostgreSQL) has a migrations_lock query, which the transaction
// runs first and holds until it ends.
func (q *Queue) applyPending(ctx context.Context, mode MigrateMode) error {
	tx, err := q.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("queue: migrate: begin: %w", err)
	}
	defer tx.Rollback()
	if q.store.Capabilities().CommitsOutOfOrder {
		if _, err := tx.ExecContext(ctx, q.query(qMigrationsLock.String()).text); err != nil {
			return fmt.Errorf("queue: migrate: lock: %w", err)
		}
	}
	p, err := plan(ctx, tx, q.sql)
	if err != nil {
		return err
	}
	if !p.changes() {
		return nil
	}
	if len(p.applied) > 0 && mode != MigrateAll {
		return outdated(p)
	}
	if _, err := tx.ExecContext(ctx, q.sql.queries[qMigrationsTable.String()].text); err != nil {
		return fmt.Errorf("queue: migrate: %w", err)
	}
	pending := p.pending
	if p.fold {
		if err := q.fold(ctx, tx, pending[0]); err != nil {
			return err
		}
		pending = pending[1:]
	}
	for _, m := range pending {
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			return fmt.Errorf("queue: migration %d (%s): %w", m.Version, m.Name, err)
		}
		if err := q.recordMigration(ctx, tx, m); err != nil {
			return err
		}
	}
	if p.functions != nil {
		if err := q.installFunctions(ctx, tx, p); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("queue: migrate: commit: %w", err)
	}
	return nil
}

// recordMigration records m as applied, inside tx.
func (q *Queue) recordMigration(ctx context.Context, tx *sql.Tx, m Migration) error {
	record := q.sql.queries[qMigrationRecord.String()]
	args, err := bindArgs("migration_record", record, []any{sql.Named("version", m.Version),
		sql.Named("name", m.Name), sql.Named("checksum", m.Checksum), sql.Named("now", model.Millis(q.now()))})
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, record.text, args...); err != nil {
		return fmt.Errorf("queue: migration %d: record: %w", m.Version, err)
	}
	return nil
}

// installFunctions installs p's functions file and records its version
// and checksum, inside tx.
func (q *Queue) installFunctions(ctx context.Context, tx *sql.Tx, p schemaPlan) error {
	if _, err := tx.ExecContext(ctx, q.sql.queries[qFunctionsTable.String()].text); err != nil {
		return fmt.Errorf("queue: migrate: %w", err)
	}
	if _, err := tx.ExecContext(ctx, p.installed); err != nil {
		return fmt.Errorf("queue: install %s version %d: %w", functionsFile, p.functions.Version, err)
	}
	record := q.sql.queries[qFunctionsRecord.String()]
	args, err := bindArgs("functions_record", record, []any{sql.Named("version", p.functions.Version),
		sql.Named("checksum", p.installedSum), sql.Named("now", model.Millis(q.now()))})
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, record.text, args...); err != nil {
		return fmt.Errorf("queue: install %s: record: %w", functionsFile, err)
	}
	return nil
}

// PostgresMigrations returns the PostgreSQL migrations this build carries,
// in order; each call returns its own copy of the list.
func PostgresMigrations() ([]Migration, error) {
	set, err := sqlOf(postgres.Store{})
	if err != nil {
		return nil, err
	}
	return slices.Clone(set.migrations), nil
}

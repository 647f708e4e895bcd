package queue

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/leasehold/leasehold/model"
)

// AppliedMigration is a row of schema_migrations.
type AppliedMigration struct {
	Version  int
	Name     string
	Checksum string
}

// querier is a *sql.DB or a *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// readApplied returns the migrations recorded in db, in order.
func readApplied(ctx context.Context, db querier, set *sqlSet) ([]AppliedMigration, error) {
	var exists int
	err := db.QueryRowContext(ctx, set.queries["migrations_table_exists"].text).Scan(&exists)
	if err != nil {
		return nil, fmt.Errorf("queue: read schema version: %w", err)
	}
	if exists == 0 {
		return nil, nil
	}
	rows, err := db.QueryContext(ctx, set.queries["migrations_applied"].text)
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
// migrations differ from this build's.
func Inspect(ctx context.Context, path string) (applied []AppliedMigration, pending []Migration, err error) {
	b := backendFor(path)
	if _, ok := b.(sqliteBackend); ok {
		return inspectFile(ctx, path)
	}
	set, err := sqlOf(b)
	if err != nil {
		return nil, nil, err
	}
	db, _, err := b.connect(ctx, Options{Path: path, ReadOnly: true, MaxConns: 1})
	if err != nil {
		return nil, nil, err
	}
	defer db.Close()
	return plan(ctx, db, set)
}

// planFile is plan for a SQLite database opened raw (snapshots, Inspect).
func planFile(ctx context.Context, db *sql.DB) (applied []AppliedMigration, pending []Migration, err error) {
	set, err := sqlOf(backends[0])
	if err != nil {
		return nil, nil, err
	}
	return plan(ctx, db, set)
}

// plan compares the applied migrations db records with those of the
// store whose SQL files are set, and returns the ones still to apply.
func plan(ctx context.Context, db querier, set *sqlSet) (applied []AppliedMigration, pending []Migration, err error) {
	known := set.migrations
	applied, err = readApplied(ctx, db, set)
	if err != nil {
		return nil, nil, err
	}
	if len(applied) > len(known) {
		return nil, nil, fmt.Errorf("queue: database schema version %d, this build supports up to %d: %w",
			applied[len(applied)-1].Version, len(known), ErrSchemaTooNew)
	}
	for i, a := range applied {
		if a.Version != known[i].Version || a.Checksum != known[i].Checksum {
			return nil, nil, fmt.Errorf("queue: migration %d (%s): %w", a.Version, a.Name, ErrSchemaMismatch)
		}
	}
	return applied, known[len(applied):], nil
}

func (q *Queue) migrate(ctx context.Context, mode MigrateMode) error {
	applied, pending, err := plan(ctx, q.db, q.sql)
	if err != nil {
		return err
	}
	if len(pending) == 0 {
		return nil
	}
	if len(applied) > 0 && mode != MigrateAll {
		return outdated(applied, pending)
	}
	return q.applyPending(ctx, mode)
}

// outdated refuses a database that needs migrations this build has.
func outdated(applied []AppliedMigration, pending []Migration) error {
	return fmt.Errorf("queue: database schema version %d, this build's is %d: %w",
		applied[len(applied)-1].Version, pending[len(pending)-1].Version, ErrSchemaOutdated)
}

// applyPending runs the pending migrations and records them, all in one
// write transaction that plans again under its lock: another process may
// have migrated the database since the first look (two workers starting on
// a new file, or many machines on a new PostgreSQL schema), and no process
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
	if lock, ok := q.sql.queries["migrations_lock"]; ok {
		if _, err := tx.ExecContext(ctx, lock.text); err != nil {
			return fmt.Errorf("queue: migrate: lock: %w", err)
		}
	}
	applied, pending, err := plan(ctx, tx, q.sql)
	if err != nil {
		return err
	}
	if len(pending) == 0 {
		return nil
	}
	if len(applied) > 0 && mode != MigrateAll {
		return outdated(applied, pending)
	}
	if _, err := tx.ExecContext(ctx, q.sql.queries["migrations_table"].text); err != nil {
		return fmt.Errorf("queue: migrate: %w", err)
	}
	for _, m := range pending {
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			return fmt.Errorf("queue: migration %d (%s): %w", m.Version, m.Name, err)
		}
		record := q.sql.queries["migration_record"]
		args, err := bindArgs("migration_record", record, []any{sql.Named("version", m.Version),
			sql.Named("name", m.Name), sql.Named("checksum", m.Checksum), sql.Named("now", model.Millis(q.now()))})
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, record.text, args...); err != nil {
			return fmt.Errorf("queue: migration %d: record: %w", m.Version, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("queue: migrate: commit: %w", err)
	}
	return nil
}

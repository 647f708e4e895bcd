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

// readApplied returns the migrations recorded in db, in order.
func readApplied(ctx context.Context, db *sql.DB) ([]AppliedMigration, error) {
	queries, err := loadQueries()
	if err != nil {
		return nil, err
	}
	var exists int
	err = db.QueryRowContext(ctx, queries["migrations_table_exists"]).Scan(&exists)
	if err != nil {
		return nil, fmt.Errorf("queue: read schema version: %w", err)
	}
	if exists == 0 {
		return nil, nil
	}
	rows, err := db.QueryContext(ctx, queries["migrations_applied"])
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

// Plan compares the database's applied migrations with this build's and
// returns the ones still to apply. It refuses a database that is newer than
// this build or whose applied migrations differ from this build's.
func Plan(ctx context.Context, db *sql.DB) (applied []AppliedMigration, pending []Migration, err error) {
	known, err := Migrations()
	if err != nil {
		return nil, nil, err
	}
	applied, err = readApplied(ctx, db)
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
	applied, pending, err := Plan(ctx, q.db)
	if err != nil {
		return err
	}
	if len(pending) == 0 {
		return nil
	}
	if len(applied) > 0 && mode != MigrateAll {
		return fmt.Errorf("queue: database schema version %d, this build's is %d: %w",
			applied[len(applied)-1].Version, pending[len(pending)-1].Version, ErrSchemaOutdated)
	}
	for _, m := range pending {
		if err := q.apply(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

// apply runs one migration and records it, in one transaction.
func (q *Queue) apply(ctx context.Context, m Migration) error {
	queries, err := loadQueries()
	if err != nil {
		return err
	}
	tx, err := q.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("queue: migration %d: begin: %w", m.Version, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, queries["migrations_table"]); err != nil {
		return fmt.Errorf("queue: migration %d: %w", m.Version, err)
	}
	if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
		return fmt.Errorf("queue: migration %d (%s): %w", m.Version, m.Name, err)
	}
	if _, err := tx.ExecContext(ctx, queries["migration_record"], sql.Named("version", m.Version),
		sql.Named("name", m.Name), sql.Named("checksum", m.Checksum), sql.Named("now", model.Millis(q.now()))); err != nil {
		return fmt.Errorf("queue: migration %d: record: %w", m.Version, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("queue: migration %d: commit: %w", m.Version, err)
	}
	return nil
}

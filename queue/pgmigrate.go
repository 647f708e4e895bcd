package queue

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// openPostgresDB opens a pool on the PostgreSQL database at rawURL whose
// statements take the store's named arguments (pgConnector). The URL must
// have passed ParseLocation; errors never quote it.
func openPostgresDB(rawURL string) (*sql.DB, error) {
	queries, err := postgresQueries()
	if err != nil {
		return nil, err
	}
	cfg, err := pgx.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("queue: postgres %s: %s: %w", RedactURL(rawURL),
			scrubPasswords("the URL is not valid", rawURL), ErrBadLocation)
	}
	return sql.OpenDB(newPGConnector(stdlib.GetConnector(*cfg), queries)), nil
}

// readPostgresApplied returns the migrations recorded in a PostgreSQL
// database, in order.
func readPostgresApplied(ctx context.Context, db querier, texts map[string]pgQuery) ([]AppliedMigration, error) {
	var exists int
	if err := db.QueryRowContext(ctx, texts["migrations_table_exists"].Text).Scan(&exists); err != nil {
		return nil, fmt.Errorf("queue: read schema version: %w", err)
	}
	if exists == 0 {
		return nil, nil
	}
	rows, err := db.QueryContext(ctx, texts["migrations_applied"].Text)
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

// planPostgres compares a PostgreSQL database's applied migrations with
// this build's, as plan does for SQLite.
func planPostgres(ctx context.Context, db querier, texts map[string]pgQuery) ([]AppliedMigration, []Migration, error) {
	known, err := PostgresMigrations()
	if err != nil {
		return nil, nil, err
	}
	applied, err := readPostgresApplied(ctx, db, texts)
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

// migratePostgres brings a PostgreSQL database to this build's schema as
// mode allows, recording each migration at now. It plans again inside one
// transaction that holds the migrations' advisory lock, so processes
// starting together on an empty database migrate it once, and nobody sees
// a schema migrated in part (PostgreSQL's DDL is transactional).
func migratePostgres(ctx context.Context, db *sql.DB, mode MigrateMode, now time.Time) error {
	texts, err := postgresQueries()
	if err != nil {
		return err
	}
	applied, pending, err := planPostgres(ctx, db, texts)
	if err != nil {
		return err
	}
	if len(pending) == 0 {
		return nil
	}
	if len(applied) > 0 && mode != MigrateAll {
		return outdated(applied, pending)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("queue: migrate: begin: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, texts["migrations_lock"].Text); err != nil {
		return fmt.Errorf("queue: migrate: lock: %w", err)
	}
	applied, pending, err = planPostgres(ctx, tx, texts)
	if err != nil {
		return err
	}
	if len(pending) == 0 {
		return nil
	}
	if len(applied) > 0 && mode != MigrateAll {
		return outdated(applied, pending)
	}
	if _, err := tx.ExecContext(ctx, texts["migrations_table"].Text); err != nil {
		return fmt.Errorf("queue: migrate: %w", err)
	}
	for _, m := range pending {
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			return fmt.Errorf("queue: migration %d (%s): %w", m.Version, m.Name, err)
		}
		if _, err := tx.ExecContext(ctx, texts["migration_record"].Text, sql.Named("version", m.Version),
			sql.Named("name", m.Name), sql.Named("checksum", m.Checksum), sql.Named("now", now.UnixMilli())); err != nil {
			return fmt.Errorf("queue: migration %d: record: %w", m.Version, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("queue: migrate: commit: %w", err)
	}
	return nil
}

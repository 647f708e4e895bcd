package queue

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/leasehold/leasehold/queue/internal/seam"
)

// A fold. A store whose schema had not been released may replace its
// migrations with one baseline; a database that applied the folded
// migrations (from the first whose schema is the baseline's on) holds the
// baseline's schema already, with other functions. migrate recognises it by its recorded history (each
// migration's name and checksum) and moves it onto the baseline: it drops
// the functions whose signatures the store's functions file no longer
// has, replaces the recorded history with the baseline's row, and
// installs the functions; no table is touched. A database that applied
// only some of the folded migrations is refused, with what to do.

// foldedMatches reports whether applied is the folded history h up to
// its SchemaFrom or later.
func foldedMatches(h *seam.Folded, applied []AppliedMigration) bool {
	if h == nil || len(applied) < h.SchemaFrom || len(applied) > len(h.Migrations) {
		return false
	}
	for i, a := range applied {
		if a != h.Migrations[i] {
			return false
		}
	}
	return true
}

// foldedPartial reports whether applied is a part of the folded history h
// that this build cannot move (short of SchemaFrom): its first migration
// is the history's, not the baseline's.
func foldedPartial(h *seam.Folded, applied []AppliedMigration) bool {
	return h != nil && len(applied) > 0 && len(applied) < h.SchemaFrom &&
		applied[0].Name == h.Migrations[0].Name && applied[0].Checksum == h.Migrations[0].Checksum
}

// refusePartial is the error for a database at a part of the folded
// history h.
func refusePartial(h *seam.Folded, applied []AppliedMigration) error {
	return fmt.Errorf("queue: database at pre-release schema version %d, from before the baseline: migrate it to version %d with leasehold at commit %s, then with this build, or start a new schema: %w",
		applied[len(applied)-1].Version, h.SchemaFrom, h.Build, ErrSchemaMismatch)
}

// fold moves a database at the whole folded history onto the baseline
// (baseline, the store's first migration), inside tx: the functions file
// is installed after, by the caller.
func (q *Queue) fold(ctx context.Context, tx *sql.Tx, baseline Migration) error {
	for _, drop := range q.sql.folded.Dropped {
		if _, err := tx.ExecContext(ctx, drop); err != nil {
			return fmt.Errorf("queue: move onto the baseline: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, q.sql.queries[qMigrationsForget.String()].text); err != nil {
		return fmt.Errorf("queue: move onto the baseline: %w", err)
	}
	return q.recordMigration(ctx, tx, baseline)
}

package queue

import (
	"context"
	"database/sql"
	"fmt"
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

// foldedHistory is the history a store's baseline replaced.
type foldedHistory struct {
	// migrations are the folded migrations as a database records them, in
	// order (their Version, Name and Checksum).
	migrations []AppliedMigration
	// dropped are the statements that drop the folded history's functions
	// whose signatures the functions file no longer has.
	dropped []string
	// schemaFrom is the first version whose schema is the baseline's (the
	// migrations after it changed functions only): a database at it or
	// later is moved onto the baseline.
	schemaFrom int
	// build is a commit that carries every folded migration, named in the
	// refusal of a database that applied too few of them.
	build string
}

// matches reports whether applied is the folded history up to
// schemaFrom or later.
func (h *foldedHistory) matches(applied []AppliedMigration) bool {
	if h == nil || len(applied) < h.schemaFrom || len(applied) > len(h.migrations) {
		return false
	}
	for i, a := range applied {
		if a != h.migrations[i] {
			return false
		}
	}
	return true
}

// partial reports whether applied is a part of the folded history that
// this build cannot move (short of schemaFrom): its first migration is
// the history's, not the baseline's.
func (h *foldedHistory) partial(applied []AppliedMigration) bool {
	return h != nil && len(applied) > 0 && len(applied) < h.schemaFrom &&
		applied[0].Name == h.migrations[0].Name && applied[0].Checksum == h.migrations[0].Checksum
}

// refusePartial is the error for a database at a part of the folded
// history.
func (h *foldedHistory) refusePartial(applied []AppliedMigration) error {
	return fmt.Errorf("queue: database at pre-release schema version %d, from before the baseline: migrate it to version %d with leasehold at commit %s, then with this build, or start a new schema: %w",
		applied[len(applied)-1].Version, h.schemaFrom, h.build, ErrSchemaMismatch)
}

// fold moves a database at the whole folded history onto the baseline
// (baseline, the store's first migration), inside tx: the functions file
// is installed after, by the caller.
func (q *Queue) fold(ctx context.Context, tx *sql.Tx, baseline Migration) error {
	for _, drop := range q.sql.folded.dropped {
		if _, err := tx.ExecContext(ctx, drop); err != nil {
			return fmt.Errorf("queue: move onto the baseline: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, q.sql.queries[qMigrationsForget.name].text); err != nil {
		return fmt.Errorf("queue: move onto the baseline: %w", err)
	}
	return q.recordMigration(ctx, tx, baseline)
}

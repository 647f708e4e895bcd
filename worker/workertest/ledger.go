package workertest

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/leasehold/leasehold/worker"
)

//go:embed ledger.sql
var ledgerSQL string

// ledgerQueries parses ledger.sql into named statements.
func ledgerQueries() map[string]string {
	out := map[string]string{}
	for _, part := range strings.Split(ledgerSQL, "-- name: ")[1:] {
		name, body, _ := strings.Cut(part, "\n")
		out[strings.TrimSpace(name)] = strings.TrimSpace(body)
	}
	return out
}

// Ledger is the double kept in a SQLite file that every worker process of
// a live run opens: each call is one transaction that reads the
// operation's entry, applies the kind's rules (the same as Service's) and
// stores the entry and the call's record. A failure before the commit
// wraps worker.ErrUnavailable (not applied); a failed commit leaves the
// outcome unknown. It can hold its write lock, so that a caller can keep
// workers waiting inside a call.
type Ledger struct {
	kind    worker.ServiceKind
	clock   clockwork.Clock
	db      *sql.DB
	queries map[string]string
}

var _ worker.Service = (*Ledger)(nil)

// OpenLedger opens (creating if needed) the ledger at path, serving as
// kind and stamping its call records with clock.
func OpenLedger(path string, kind worker.ServiceKind, clock clockwork.Clock) (*Ledger, error) {
	if clock == nil {
		return nil, errors.New("open service ledger: a clock is required")
	}
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_pragma=synchronous(FULL)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open service ledger %s: %w", path, err)
	}
	l := &Ledger{kind: kind, clock: clock, db: db, queries: ledgerQueries()}
	if err := switchToWAL(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("open service ledger %s: %w", path, err)
	}
	if _, err := db.Exec(l.queries["schema"]); err != nil {
		db.Close()
		return nil, fmt.Errorf("open service ledger %s: %w", path, err)
	}
	return l, nil
}

// walAttempts bounds how often switchToWAL tries.
const walAttempts = 3

// switchToWAL puts the ledger's file in WAL mode (a mode the file keeps,
// so the pool's other connections find it set). Every worker process opens
// the ledger, often at once on a new file: the switch needs the file's
// exclusive lock, taken from inside the read that looks at its header, and
// a switch that meets another process's transaction fails with SQLITE_BUSY
// at once rather than waiting (waiting could deadlock). The next attempt's
// read waits out the busy timeout for that transaction, and then finds the
// file in WAL mode already or switches it; any other error ends the tries.
func switchToWAL(db *sql.DB) error {
	var err error
	for range walAttempts {
		var mode string
		if err = db.QueryRow("PRAGMA journal_mode=WAL").Scan(&mode); err == nil {
			if mode != "wal" {
				return fmt.Errorf("switch to WAL: the file stays in %s mode", mode)
			}
			return nil
		}
		if !isBusy(err) {
			break
		}
	}
	return fmt.Errorf("switch to WAL: %w", err)
}

// isBusy reports whether err is SQLite's SQLITE_BUSY (any extended code).
func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// Close closes the ledger.
func (l *Ledger) Close() error { return l.db.Close() }

// Kind returns the kind the ledger serves as.
func (l *Ledger) Kind() worker.ServiceKind { return l.kind }

// load reads the operation's entry inside tx; an operation never seen has
// the zero entry.
func (l *Ledger) load(tx *sql.Tx, opID string) (entry, error) {
	var e entry
	err := tx.QueryRow(l.queries["get"], opID).Scan(&e.applied, &e.result, &e.fenceMax)
	if errors.Is(err, sql.ErrNoRows) {
		return entry{}, nil
	}
	return e, err
}

// Call applies the operation unless its kind deduplicates or refuses it.
func (l *Ledger) Call(ctx context.Context, c worker.Call) (string, error) {
	unavailable := func(err error) error {
		return fmt.Errorf("service call for %s: %w: %v", c.OpID, worker.ErrUnavailable, err)
	}
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return "", unavailable(err)
	}
	defer tx.Rollback()
	e, err := l.load(tx, c.OpID)
	if err != nil {
		return "", unavailable(err)
	}
	result, outcome, refused := call(l.kind, &e, c)
	now := l.clock.Now().UnixMilli()
	effect, appliedAt := "", int64(0)
	if outcome == Applied {
		effect, appliedAt = c.Effect, now
	}
	if _, err := tx.Exec(l.queries["put"], c.OpID, effect, e.applied, e.result, e.fenceMax, appliedAt); err != nil {
		return "", unavailable(err)
	}
	if _, err := tx.Exec(l.queries["log_call"], c.OpID, c.Fence, string(outcome), now); err != nil {
		return "", unavailable(err)
	}
	if refused != nil {
		// The refusal is logged when it commits; it is a refusal either way.
		_ = tx.Commit()
		return "", refused
	}
	if err := tx.Commit(); err != nil {
		return "", fmt.Errorf("service commit for %s: %w", c.OpID, err) // outcome unknown
	}
	return result, nil
}

// Status answers for the kinds that can; a Fenced ledger registers the
// asker's fence.
func (l *Ledger) Status(ctx context.Context, opID string, fence int64) (bool, string, error) {
	if !l.kind.CanAnswer() {
		return false, "", worker.ErrNoStatus
	}
	if l.kind != worker.Fenced {
		// Only a Fenced ledger writes on a query: the others read outside
		// any transaction, and keep answering while the lock is held.
		var e entry
		err := l.db.QueryRowContext(ctx, l.queries["get"], opID).Scan(&e.applied, &e.result, &e.fenceMax)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return false, "", fmt.Errorf("service status of %s: %w", opID, err)
		}
		return status(l.kind, &e, fence)
	}
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return false, "", fmt.Errorf("service status of %s: %w", opID, err)
	}
	defer tx.Rollback()
	e, err := l.load(tx, opID)
	if err != nil {
		return false, "", fmt.Errorf("service status of %s: %w", opID, err)
	}
	applied, result, err := status(l.kind, &e, fence)
	if err != nil {
		return false, "", err
	}
	if _, err := tx.Exec(l.queries["put"], opID, "", e.applied, e.result, e.fenceMax, 0); err != nil {
		return false, "", fmt.Errorf("service status of %s: %w", opID, err)
	}
	if err := tx.Commit(); err != nil {
		return false, "", fmt.Errorf("service status of %s: %w", opID, err)
	}
	return applied, result, nil
}

// Applications returns every applied operation and how often the ledger
// applied it.
func (l *Ledger) Applications() (map[string]int, error) {
	rows, err := l.db.Query(l.queries["all"])
	if err != nil {
		return nil, fmt.Errorf("read the service's applications: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var op string
		var n int
		if err := rows.Scan(&op, &n); err != nil {
			return nil, fmt.Errorf("read the service's applications: %w", err)
		}
		out[op] = n
	}
	return out, rows.Err()
}

// Records returns how the ledger answered each call, in the order it did.
func (l *Ledger) Records() ([]CallRecord, error) {
	rows, err := l.db.Query(l.queries["calls"])
	if err != nil {
		return nil, fmt.Errorf("read the service's call log: %w", err)
	}
	defer rows.Close()
	var out []CallRecord
	for rows.Next() {
		var c CallRecord
		var at int64
		if err := rows.Scan(&c.OpID, &c.Fence, &c.Outcome, &at); err != nil {
			return nil, fmt.Errorf("read the service's call log: %w", err)
		}
		c.At = time.UnixMilli(at).UTC()
		out = append(out, c)
	}
	return out, rows.Err()
}

// Hold takes the ledger's write lock and keeps it until release is called:
// every Call meanwhile waits inside the service (up to its busy timeout),
// after the worker recorded its intent and before it can record a receipt.
// Status of a kind that only reads keeps answering. release is safe to
// call more than once.
func (l *Ledger) Hold(ctx context.Context) (release func() error, err error) {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("hold the ledger's lock: %w", err)
	}
	// BEGIN IMMEDIATE (the DSN's _txlock) has taken the lock; a write
	// makes sure of it whatever the driver defers.
	if _, err := tx.Exec(l.queries["hold"]); err != nil {
		tx.Rollback()
		return nil, fmt.Errorf("hold the ledger's lock: %w", err)
	}
	var once sync.Once
	return func() error {
		var err error
		once.Do(func() { err = tx.Rollback() })
		return err
	}, nil
}

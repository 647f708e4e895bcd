// Package ledger is the live run's external service: a ledger of applied
// operations in a SQLite file that every worker process shares, behaving as
// the service kind it is opened with (see worker.ServiceKind). It counts
// every application, so the demo and the chaos checker can prove from the
// service's own record that none happened twice, and it can hold its write
// lock so that a caller can keep workers waiting inside a call.
package ledger

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/leasehold/leasehold/queue"
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

// Service applies operations into the ledger file and behaves as the kind
// it was opened with. It satisfies worker.Service.
type Service struct {
	kind    worker.ServiceKind
	db      *sql.DB
	queries map[string]string
}

// Open opens (creating if needed) the ledger at path, serving as kind.
func Open(path string, kind worker.ServiceKind) (*Service, error) {
	// Every worker process opens the ledger: queue.Connector survives
	// their race to switch a new file to WAL.
	db := sql.OpenDB(queue.Connector(path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate"))
	s := &Service{kind: kind, db: db, queries: ledgerQueries()}
	if _, err := db.Exec(s.queries["schema"]); err != nil {
		db.Close()
		return nil, fmt.Errorf("open service ledger %s: %w", path, err)
	}
	return s, nil
}

// Close closes the ledger.
func (s *Service) Close() error { return s.db.Close() }

// Kind returns the kind the service runs as.
func (s *Service) Kind() worker.ServiceKind { return s.kind }

// Call applies the operation unless the kind deduplicates or refuses it.
func (s *Service) Call(ctx context.Context, c worker.Call) (string, error) {
	tx, err := s.db.BeginTx(context.Background(), nil)
	if err != nil {
		return "", fmt.Errorf("%w: %v", worker.ErrUnavailable, err)
	}
	defer tx.Rollback()
	var applied int
	var result string
	var fenceMax int64
	err = tx.QueryRow(s.queries["get"], c.OpID).Scan(&applied, &result, &fenceMax)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("%w: %v", worker.ErrUnavailable, err)
	}
	now := time.Now().UnixMilli()
	switch s.kind {
	case worker.Dedup:
		if applied > 0 {
			if _, err := tx.Exec(s.queries["log_call"], c.OpID, c.Fence, CallDeduplicated, now); err != nil {
				return "", fmt.Errorf("%w: %v", worker.ErrUnavailable, err)
			}
			return result, tx.Commit()
		}
	case worker.Fenced:
		if c.Fence < fenceMax {
			// The refusal is logged when it commits; it is a refusal
			// either way.
			if _, err := tx.Exec(s.queries["log_call"], c.OpID, c.Fence, CallRefused, now); err == nil {
				_ = tx.Commit()
			}
			return "", fmt.Errorf("operation %s fence %d below %d: %w", c.OpID, c.Fence, fenceMax, worker.ErrStaleFence)
		}
	}
	result = fmt.Sprintf("%s#%s", c.Effect, c.OpID)
	if _, err := tx.Exec(s.queries["apply"], c.OpID, c.Effect, result, c.Fence, now); err != nil {
		return "", fmt.Errorf("%w: %v", worker.ErrUnavailable, err)
	}
	if _, err := tx.Exec(s.queries["log_call"], c.OpID, c.Fence, CallApplied, now); err != nil {
		return "", fmt.Errorf("%w: %v", worker.ErrUnavailable, err)
	}
	if err := tx.Commit(); err != nil {
		return "", fmt.Errorf("service commit for %s: %w", c.OpID, err) // outcome unknown
	}
	return result, nil
}

// Status answers for the kinds that can; Fenced registers the fence.
func (s *Service) Status(ctx context.Context, opID string, fence int64) (bool, string, error) {
	if !s.kind.CanAnswer() {
		return false, "", worker.ErrNoStatus
	}
	if s.kind == worker.Fenced {
		if _, err := s.db.Exec(s.queries["register_fence"], opID, fence); err != nil {
			return false, "", err
		}
	}
	var applied int
	var result string
	var fenceMax int64
	err := s.db.QueryRow(s.queries["get"], opID).Scan(&applied, &result, &fenceMax)
	if errors.Is(err, sql.ErrNoRows) {
		return false, "", nil
	}
	if err != nil {
		return false, "", err
	}
	return applied > 0, result, nil
}

// Applications returns every applied operation and how often the service
// applied it.
func (s *Service) Applications() (map[string]int, error) {
	rows, err := s.db.Query(s.queries["all"])
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var op string
		var n int
		if err := rows.Scan(&op, &n); err != nil {
			return nil, err
		}
		out[op] = n
	}
	return out, rows.Err()
}

// Call outcomes, as the ledger's call log records them.
const (
	CallApplied      = "applied"
	CallDeduplicated = "deduplicated"
	CallRefused      = "refused_stale_fence"
)

// CallRecord is one call the service answered, from its call log.
type CallRecord struct {
	OpID    string
	Fence   int64
	Outcome string // one of the Call outcomes
	At      time.Time
}

// Calls returns every call the service answered, in the order it did.
func (s *Service) Calls() ([]CallRecord, error) {
	rows, err := s.db.Query(s.queries["calls"])
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
// Status of a kind that only reads keeps answering. release is safe to call
// more than once.
func (s *Service) Hold(ctx context.Context) (release func() error, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("hold the ledger's lock: %w", err)
	}
	// BEGIN IMMEDIATE (the DSN's _txlock) has taken the lock; a write
	// makes sure of it whatever the driver defers.
	if _, err := tx.Exec(s.queries["hold"]); err != nil {
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

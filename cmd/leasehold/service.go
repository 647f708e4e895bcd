package main

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/worker"
)

//go:embed service.sql
var serviceSQL string

// serviceQueries parses service.sql into named statements.
func serviceQueries() map[string]string {
	out := map[string]string{}
	for _, part := range strings.Split(serviceSQL, "-- name: ")[1:] {
		name, body, _ := strings.Cut(part, "\n")
		out[strings.TrimSpace(name)] = strings.TrimSpace(body)
	}
	return out
}

// ledgerService is the live demo's external service: it applies
// operations into a ledger file every worker process shares, and behaves
// as the kind it is given (see worker.ServiceKind). It counts every
// application, so the demo can prove none happened twice.
type ledgerService struct {
	kind    worker.ServiceKind
	db      *sql.DB
	queries map[string]string
}

func openLedger(path string, kind worker.ServiceKind) (*ledgerService, error) {
	// Every worker process opens the ledger: queue.Connector survives
	// their race to switch a new file to WAL.
	db := sql.OpenDB(queue.Connector(path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate"))
	s := &ledgerService{kind: kind, db: db, queries: serviceQueries()}
	if _, err := db.Exec(s.queries["schema"]); err != nil {
		db.Close()
		return nil, fmt.Errorf("open service ledger %s: %w", path, err)
	}
	return s, nil
}

func (s *ledgerService) Close() error { return s.db.Close() }

// Kind returns the kind the service runs as.
func (s *ledgerService) Kind() worker.ServiceKind { return s.kind }

// Call applies the operation unless the kind deduplicates or refuses it.
func (s *ledgerService) Call(ctx context.Context, c worker.Call) (string, error) {
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
	switch s.kind {
	case worker.Dedup:
		if applied > 0 {
			return result, tx.Commit()
		}
	case worker.Fenced:
		if c.Fence < fenceMax {
			return "", fmt.Errorf("operation %s fence %d below %d: %w", c.OpID, c.Fence, fenceMax, worker.ErrStaleFence)
		}
	}
	result = fmt.Sprintf("%s#%s", c.Effect, c.OpID)
	if _, err := tx.Exec(s.queries["apply"], c.OpID, c.Effect, result, c.Fence, time.Now().UnixMilli()); err != nil {
		return "", fmt.Errorf("%w: %v", worker.ErrUnavailable, err)
	}
	if err := tx.Commit(); err != nil {
		return "", fmt.Errorf("service commit for %s: %w", c.OpID, err) // outcome unknown
	}
	return result, nil
}

// Status answers for the kinds that can; Fenced registers the fence.
func (s *ledgerService) Status(ctx context.Context, opID string, fence int64) (bool, string, error) {
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

// applications returns every applied operation and how often.
func (s *ledgerService) applications() (map[string]int, error) {
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

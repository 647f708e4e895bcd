// Package workertest provides the external-service double that the
// worker's tests, the simulator and the live run share, as
// net/http/httptest sits beside net/http: one implementation of the four
// service kinds (worker.ServiceKind), kept in memory (Service) or in a
// SQLite file that several worker processes open at once (Ledger). Both
// count every application of every operation, so a caller can prove from
// the service's own record that none was applied twice.
//
// # Usage
//
//	svc := workertest.NewService(worker.Fenced, clock)
//	w, _ := worker.New(worker.Config{..., Service: svc})
//	...
//	svc.Applications(opID) // 1, or the test fails
//
//	ledger, _ := workertest.OpenLedger(path, worker.Dedup, clock)
//	defer ledger.Close()
package workertest

import (
	"fmt"
	"time"

	"github.com/leasehold/leasehold/worker"
)

// Outcome is how the double answered one call.
type Outcome string

// The outcomes of a call.
const (
	// Applied: the operation was applied (again, for the kinds that
	// neither deduplicate nor fence).
	Applied Outcome = "applied"
	// Deduplicated: a Dedup service had applied the operation already and
	// returned its first result.
	Deduplicated Outcome = "deduplicated"
	// RefusedStaleFence: a Fenced service refused a call whose fence is
	// below the highest it has seen for the operation.
	RefusedStaleFence Outcome = "refused_stale_fence"
)

// CallRecord is one call the double answered.
type CallRecord struct {
	OpID    string
	Fence   int64
	Outcome Outcome
	At      time.Time
}

// entry is what the double knows of one operation.
type entry struct {
	applied  int    // applications so far
	result   string // the first application's result
	fenceMax int64  // the highest fence a call or a Fenced status query carried
}

// call applies the rules of kind to call c of the operation whose entry
// is e, changing e as the service would: the one implementation of what
// each kind does with a call. A refusal returns an error wrapping
// worker.ErrStaleFence.
func call(kind worker.ServiceKind, e *entry, c worker.Call) (string, Outcome, error) {
	switch kind {
	case worker.Dedup:
		if e.applied > 0 {
			return e.result, Deduplicated, nil
		}
	case worker.Fenced:
		if c.Fence < e.fenceMax {
			return "", RefusedStaleFence, fmt.Errorf("operation %s fence %d below %d: %w", c.OpID, c.Fence, e.fenceMax, worker.ErrStaleFence)
		}
	}
	e.applied++
	e.fenceMax = max(e.fenceMax, c.Fence)
	result := fmt.Sprintf("%s#%d", c.Effect, e.applied)
	if e.applied == 1 {
		e.result = result
	}
	return result, Applied, nil
}

// status applies the rules of kind to a status query under fence about
// the operation whose entry is e: the kinds that can answer say whether
// it was applied (and its first result), and a Fenced service registers
// the asker's fence; the others return worker.ErrNoStatus.
func status(kind worker.ServiceKind, e *entry, fence int64) (bool, string, error) {
	if !kind.CanAnswer() {
		return false, "", worker.ErrNoStatus
	}
	if kind == worker.Fenced {
		e.fenceMax = max(e.fenceMax, fence)
	}
	return e.applied > 0, e.result, nil
}

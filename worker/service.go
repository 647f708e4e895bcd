package worker

import (
	"context"
	"errors"
	"fmt"
)

// ServiceKind declares what an external service can do to help the worker
// apply each operation at most once. Each kind gets a different guarantee:
//
//   - Dedup: the service applies each operation ID at most once. Calling
//     again is always safe: exactly once.
//   - Fenced: the service answers whether an operation was applied and
//     refuses a call whose fence is lower than one it has seen for that
//     operation (asking registers the asker's fence). An uncertain
//     operation is asked about, then called under the new fence if it was
//     not applied; a stalled older claim's late call is refused: exactly
//     once.
//   - Queryable: the service answers whether an operation was applied but
//     neither deduplicates nor checks fences. An applied operation gets its
//     receipt; one not applied after this claim's own lost response is
//     called again (a call that has returned, even with a timeout, has been
//     decided); one left uncertain by an earlier claim goes to needs_review,
//     since that claim may be stalled and call late: at most once.
//   - Plain: the service can do neither. Any uncertain operation goes to
//     needs_review for an operator to settle: at most once.
type ServiceKind string

// The service kinds.
const (
	Dedup     ServiceKind = "dedup"
	Fenced    ServiceKind = "fenced"
	Queryable ServiceKind = "queryable"
	Plain     ServiceKind = "plain"
)

// ServiceKinds lists every kind.
func ServiceKinds() []ServiceKind { return []ServiceKind{Dedup, Fenced, Queryable, Plain} }

// ParseServiceKind returns the kind named name.
func ParseServiceKind(name string) (ServiceKind, error) {
	for _, k := range ServiceKinds() {
		if string(k) == name {
			return k, nil
		}
	}
	return "", fmt.Errorf("unknown service kind %q (want one of %v)", name, ServiceKinds())
}

// CanAnswer reports whether the kind answers Status.
func (k ServiceKind) CanAnswer() bool { return k == Fenced || k == Queryable }

// Call is one request to apply a customer-visible operation.
type Call struct {
	OpID   string
	TaskID string
	Effect string // the payload's effect name, e.g. "charge"
	Fence  int64
}

// Service is an external service that applies customer-visible effects.
type Service interface {
	// Kind declares what the service can do (see ServiceKind).
	Kind() ServiceKind
	// Call asks the service to apply an operation. ErrUnavailable and
	// ErrStaleFence mean it was not applied; any other error leaves the
	// outcome unknown.
	Call(ctx context.Context, c Call) (result string, err error)
	// Status reports whether an operation was applied (and its result);
	// kinds that cannot answer return ErrNoStatus. A Fenced service
	// registers fence, refusing later calls under lower fences.
	Status(ctx context.Context, opID string, fence int64) (applied bool, result string, err error)
}

// Service errors.
var (
	// ErrUnavailable: the service refused the call before applying it.
	ErrUnavailable = errors.New("service unavailable")
	// ErrStaleFence: a fenced service refused a call under an old fence.
	ErrStaleFence = errors.New("service refused a stale fence")
	// ErrNoStatus: the service cannot say whether an operation was applied.
	ErrNoStatus = errors.New("service cannot report status")
)

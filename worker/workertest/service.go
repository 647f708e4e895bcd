package workertest

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/worker"
)

// Service is the double kept in memory, for one process: the worker's
// tests and the simulator. It records every call and status query it
// receives and every application it makes. It is safe for concurrent use.
type Service struct {
	kind  worker.ServiceKind
	clock clockwork.Clock

	mu       sync.Mutex
	entries  map[string]*entry
	calls    []worker.Call
	records  []CallRecord
	log      []string // "call <op> <fence>" and "status <op> <fence>", in order
	statuses int
	applied  []string // every application, in order
	order    []string // operations in order of first application
}

var _ worker.Service = (*Service)(nil)

// NewService returns a double of kind in memory, stamping its call records
// with clock.
func NewService(kind worker.ServiceKind, clock clockwork.Clock) *Service {
	if clock == nil {
		panic("workertest: NewService needs a clock")
	}
	return &Service{kind: kind, clock: clock, entries: map[string]*entry{}}
}

// Kind returns the kind the double runs as.
func (s *Service) Kind() worker.ServiceKind { return s.kind }

// Call applies the operation unless its kind deduplicates or refuses it.
func (s *Service) Call(_ context.Context, c worker.Call) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, c)
	s.log = append(s.log, fmt.Sprintf("call %s %d", c.OpID, c.Fence))
	e := s.entry(c.OpID)
	result, outcome, err := call(s.kind, e, c)
	s.records = append(s.records, CallRecord{OpID: c.OpID, Fence: c.Fence, Outcome: outcome, At: s.clock.Now()})
	if outcome == Applied {
		s.applied = append(s.applied, c.OpID)
		if e.applied == 1 {
			s.order = append(s.order, c.OpID)
		}
	}
	return result, err
}

// Status answers for the kinds that can; a Fenced double registers the
// asker's fence.
func (s *Service) Status(_ context.Context, opID string, fence int64) (bool, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.statuses++
	s.log = append(s.log, fmt.Sprintf("status %s %d", opID, fence))
	return status(s.kind, s.entry(opID), fence)
}

// entry returns the operation's entry, creating it; s.mu is held.
func (s *Service) entry(opID string) *entry {
	e, ok := s.entries[opID]
	if !ok {
		e = &entry{}
		s.entries[opID] = e
	}
	return e
}

// Applications returns how many times the operation was applied.
func (s *Service) Applications(opID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.entries[opID]; ok {
		return e.applied
	}
	return 0
}

// Applied reports whether the operation was applied: the ground truth an
// operator finds by asking the provider.
func (s *Service) Applied(opID string) bool { return s.Applications(opID) > 0 }

// ApplicationsSince returns the operations applied after the first n
// applications, in order, and the new total.
func (s *Service) ApplicationsSince(n int) ([]string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.applied[n:]), len(s.applied)
}

// AppliedOps returns the operations applied at least once, in order of
// first application.
func (s *Service) AppliedOps() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.order)
}

// Calls returns every call the double received, in order.
func (s *Service) Calls() []worker.Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// CallCount returns how many calls the double received.
func (s *Service) CallCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

// Records returns how the double answered each call, in order.
func (s *Service) Records() []CallRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.records)
}

// Log returns every call and status query as "call <op> <fence>" or
// "status <op> <fence>", in order.
func (s *Service) Log() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

// Statuses returns how many status queries the double received.
func (s *Service) Statuses() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.statuses
}

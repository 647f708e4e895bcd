package sim

import (
	"context"
	"fmt"

	"github.com/leasehold/leasehold/worker"
)

// EffectService is the simulator's double of an external service. It
// records every call it receives and every application it makes, and runs
// as any worker.ServiceKind. The invariant is counted on applications, so
// it can fail: no operation may be applied twice, whatever the kind.
type EffectService struct {
	kind         worker.ServiceKind
	calls        int
	applications map[string]int
	results      map[string]string
	fences       map[string]int64 // highest fence seen per operation (Fenced)
	order        []string         // operations in order of first application
	log          []string         // every application, in order
}

// NewEffectService returns a double of the given kind.
func NewEffectService(kind worker.ServiceKind) *EffectService {
	return &EffectService{kind: kind, applications: map[string]int{}, results: map[string]string{}, fences: map[string]int64{}}
}

// Kind returns the kind the double runs as.
func (s *EffectService) Kind() worker.ServiceKind { return s.kind }

// Call applies the operation unless the kind refuses or deduplicates it.
func (s *EffectService) Call(_ context.Context, c worker.Call) (string, error) {
	s.calls++
	switch s.kind {
	case worker.Dedup:
		if result, ok := s.results[c.OpID]; ok {
			return result, nil
		}
	case worker.Fenced:
		if c.Fence < s.fences[c.OpID] {
			return "", fmt.Errorf("operation %s fence %d below %d: %w", c.OpID, c.Fence, s.fences[c.OpID], worker.ErrStaleFence)
		}
		s.fences[c.OpID] = c.Fence
	}
	s.applications[c.OpID]++
	s.log = append(s.log, c.OpID)
	result := fmt.Sprintf("%s#%d", c.Effect, s.applications[c.OpID])
	if s.applications[c.OpID] == 1 {
		s.order = append(s.order, c.OpID)
		s.results[c.OpID] = result
	}
	return result, nil
}

// Status answers for the kinds that can; a Fenced double registers the
// asker's fence.
func (s *EffectService) Status(_ context.Context, opID string, fence int64) (bool, string, error) {
	switch s.kind {
	case worker.Fenced:
		if fence > s.fences[opID] {
			s.fences[opID] = fence
		}
	case worker.Queryable:
	default:
		return false, "", worker.ErrNoStatus
	}
	result, ok := s.results[opID]
	return ok, result, nil
}

// Applied reports whether the operation was applied: the ground truth an
// operator finds by asking the provider.
func (s *EffectService) Applied(opID string) bool { return s.applications[opID] > 0 }

// Applications returns how many times the operation was applied.
func (s *EffectService) Applications(opID string) int { return s.applications[opID] }

// ApplicationsSince returns the operations applied since the first n
// applications, in order, and the new total.
func (s *EffectService) ApplicationsSince(n int) ([]string, int) {
	return s.log[n:], len(s.log)
}

// Calls returns how many calls the double received.
func (s *EffectService) Calls() int { return s.calls }

// AppliedOps returns the operations applied at least once, in order of
// first application.
func (s *EffectService) AppliedOps() []string { return append([]string(nil), s.order...) }

package faults

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/leasehold/leasehold/worker"
)

// ServiceFault is a one-shot fault a Service can be armed with.
type ServiceFault string

// The service faults.
const (
	// LostResponse: the call is forwarded and applied, but its reply is
	// lost; the caller gets an error that reads as a timeout, so the
	// outcome is unknown.
	LostResponse ServiceFault = "lost_response"
	// ServiceUnavailable: the call is not forwarded; the caller gets an
	// error wrapping worker.ErrUnavailable (not applied).
	ServiceUnavailable ServiceFault = "service_unavailable"
)

// String returns the fault's name.
func (f ServiceFault) String() string { return string(f) }

// ServiceCounts counts the service faults that have fired.
type ServiceCounts struct {
	LostResponse int
	Unavailable  int
}

// String lists the counts in a fixed order.
func (c ServiceCounts) String() string {
	return fmt.Sprintf("lost_response=%d service_unavailable=%d", c.LostResponse, c.Unavailable)
}

// Service is a worker.Service that wraps another (the external effect
// service) and fails its calls on command. It simulates a lost response
// (the service applies the call, the caller gets an *Error wrapping
// ErrInjected whose Timeout() is true: neither worker.ErrUnavailable nor
// worker.ErrStaleFence, so the outcome reads as unknown) and an outage
// (the call is not forwarded; the *Error wraps ErrInjected and
// worker.ErrUnavailable). Armed faults are one-shot and hit Calls in
// arming order; Status and Kind are always forwarded. Service is safe for
// concurrent use.
type Service struct {
	inner worker.Service

	mu     sync.Mutex
	armed  []ServiceFault
	counts ServiceCounts
}

var _ worker.Service = (*Service)(nil)

// NewService wraps inner.
func NewService(inner worker.Service) *Service {
	if inner == nil {
		panic("faults: NewService needs a service")
	}
	return &Service{inner: inner}
}

// ArmLostResponse makes the next Call apply but lose its reply.
func (s *Service) ArmLostResponse() { s.arm(LostResponse) }

// ArmUnavailable makes the next Call fail without being forwarded.
func (s *Service) ArmUnavailable() { s.arm(ServiceUnavailable) }

func (s *Service) arm(f ServiceFault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = append(s.armed, f)
}

// Disarm clears every armed fault.
func (s *Service) Disarm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = nil
}

// Armed returns the faults armed and not yet fired, in arming order.
func (s *Service) Armed() []ServiceFault {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ServiceFault(nil), s.armed...)
}

// Counts returns how many faults have fired.
func (s *Service) Counts() ServiceCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts
}

// String describes the armed faults and the counts.
func (s *Service) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, len(s.armed))
	for i, f := range s.armed {
		names[i] = string(f)
	}
	return fmt.Sprintf("service(%s): armed [%s]; fired %s", s.inner.Kind(), strings.Join(names, " "), s.counts)
}

// take removes and counts the first armed fault.
func (s *Service) take() (ServiceFault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.armed) == 0 {
		return "", false
	}
	f := s.armed[0]
	s.armed = s.armed[1:]
	switch f {
	case LostResponse:
		s.counts.LostResponse++
	case ServiceUnavailable:
		s.counts.Unavailable++
	}
	return f, true
}

// Kind is the inner service's.
func (s *Service) Kind() worker.ServiceKind { return s.inner.Kind() }

// Call forwards c unless a fault is armed (see Service).
func (s *Service) Call(ctx context.Context, c worker.Call) (string, error) {
	f, ok := s.take()
	if !ok {
		return s.inner.Call(ctx, c)
	}
	op := "call " + c.OpID
	if f == ServiceUnavailable {
		return "", &Error{Fault: string(f), Op: op, Description: "service unavailable", also: worker.ErrUnavailable}
	}
	// The service decides the call; whatever it answered is lost.
	_, _ = s.inner.Call(ctx, c)
	return "", &Error{Fault: string(f), Op: op, Description: "timed out waiting for the response", timeout: true}
}

// Status is forwarded.
func (s *Service) Status(ctx context.Context, opID string, fence int64) (bool, string, error) {
	return s.inner.Status(ctx, opID, fence)
}

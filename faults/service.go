package faults

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/leasehold/leasehold/worker"
)

// ServiceFault is a one-shot fault a Service can be armed with.
type ServiceFault string

// The service faults.
const (
	// LostResponse: the call is forwarded and its reply is lost; the
	// caller gets an error that reads as a timeout, so the outcome is
	// unknown. If the service refused the call instead (an error wrapping
	// worker.ErrUnavailable or worker.ErrStaleFence: not applied), there is
	// no application to hide: the refusal is returned as it is, and the
	// fault is spent without firing (counted as LostResponseRefused).
	LostResponse ServiceFault = "lost_response"
	// ServiceUnavailable: the call is not forwarded; the caller gets an
	// error wrapping worker.ErrUnavailable (not applied).
	ServiceUnavailable ServiceFault = "service_unavailable"
)

// String returns the fault's name.
func (f ServiceFault) String() string { return string(f) }

// ServiceCounts counts the service faults that have fired.
type ServiceCounts struct {
	// LostResponse counts replies lost.
	LostResponse int
	// Unavailable counts calls refused without being forwarded.
	Unavailable int
	// LostResponseRefused counts LostResponse faults spent on a call the
	// service refused: its refusal was returned, not lost.
	LostResponseRefused int
}

// String lists the counts in a fixed order.
func (c ServiceCounts) String() string {
	return fmt.Sprintf("lost_response=%d service_unavailable=%d lost_response_refused=%d",
		c.LostResponse, c.Unavailable, c.LostResponseRefused)
}

// Service is a worker.Service that wraps another (the external effect
// service) and fails its calls on command. It simulates a lost response
// (the service decides the call, the caller gets an *Error wrapping
// ErrInjected whose Timeout() is true: neither worker.ErrUnavailable nor
// worker.ErrStaleFence, so the outcome reads as unknown; a call the
// service refused returns its refusal instead, see LostResponse) and an
// outage (the call is not forwarded; the *Error wraps ErrInjected and
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

// ArmLostResponse makes the next Call lose its reply (see LostResponse).
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

// take removes the first armed fault.
func (s *Service) take() (ServiceFault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.armed) == 0 {
		return "", false
	}
	f := s.armed[0]
	s.armed = s.armed[1:]
	return f, true
}

// count adds one to a count under the lock.
func (s *Service) count(n *int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	*n++
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
		s.count(&s.counts.Unavailable)
		return "", &Error{Fault: string(f), Op: op, Description: "service unavailable", Also: worker.ErrUnavailable}
	}
	// The service decides the call. A refusal (not applied) is passed on:
	// reading it as unknown would pretend an application might have
	// happened. Any other answer is lost.
	_, err := s.inner.Call(ctx, c)
	if errors.Is(err, worker.ErrUnavailable) || errors.Is(err, worker.ErrStaleFence) {
		s.count(&s.counts.LostResponseRefused)
		return "", err
	}
	s.count(&s.counts.LostResponse)
	return "", &Error{Fault: string(f), Op: op, Description: "timed out waiting for the response", TimedOut: true}
}

// Status is forwarded.
func (s *Service) Status(ctx context.Context, opID string, fence int64) (bool, string, error) {
	return s.inner.Status(ctx, opID, fence)
}

package faults_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/faults"
	"github.com/leasehold/leasehold/worker"
	"github.com/leasehold/leasehold/worker/workertest"
)

// newService returns the service double, queryable: it answers whether
// an operation was applied but applies every call it gets.
func newService() *workertest.Service {
	return workertest.NewService(worker.Queryable, clockwork.NewFakeClock())
}

func TestServiceUnarmedForwards(t *testing.T) {
	inner := newService()
	svc := faults.NewService(inner)
	require.Equal(t, worker.Queryable, svc.Kind())
	res, err := svc.Call(context.Background(), worker.Call{OpID: "op-1", Effect: "charge", Fence: 1})
	require.NoError(t, err)
	require.Equal(t, "charge#1", res)
	require.Equal(t, 1, inner.Applications("op-1"))
	require.Equal(t, faults.ServiceCounts{}, svc.Counts())
}

func TestServiceLostResponseApplies(t *testing.T) {
	ctx := context.Background()
	inner := newService()
	svc := faults.NewService(inner)
	svc.ArmLostResponse()
	res, err := svc.Call(ctx, worker.Call{OpID: "op-1", Effect: "charge", Fence: 1})
	require.Empty(t, res)
	requireInjected(t, err, "lost_response")
	require.NotErrorIs(t, err, worker.ErrUnavailable, "the outcome must look unknown")
	require.NotErrorIs(t, err, worker.ErrStaleFence, "the outcome must look unknown")
	require.NotErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "timed out")
	var timeout interface{ Timeout() bool }
	require.True(t, errors.As(err, &timeout) && timeout.Timeout())
	require.Equal(t, 1, inner.Applications("op-1"), "the service applied the call")

	applied, result, err := svc.Status(ctx, "op-1", 1)
	require.NoError(t, err)
	require.True(t, applied)
	require.Equal(t, "charge#1", result)
	require.Equal(t, faults.ServiceCounts{LostResponse: 1}, svc.Counts())
}

func TestServiceUnavailableDoesNotApply(t *testing.T) {
	inner := newService()
	svc := faults.NewService(inner)
	svc.ArmUnavailable()
	_, err := svc.Call(context.Background(), worker.Call{OpID: "op-1", Fence: 1})
	requireInjected(t, err, "service_unavailable")
	require.ErrorIs(t, err, worker.ErrUnavailable)
	require.Zero(t, inner.CallCount(), "the call was not forwarded")
	var fe *faults.Error
	require.ErrorAs(t, err, &fe)
	require.False(t, fe.Timeout())
	require.Equal(t, "call op-1: service unavailable (faults: injected service_unavailable)", err.Error())
}

func TestServiceFaultsFireInOrder(t *testing.T) {
	ctx := context.Background()
	inner := newService()
	svc := faults.NewService(inner)
	svc.ArmUnavailable()
	svc.ArmLostResponse()
	require.Equal(t, []faults.ServiceFault{faults.ServiceUnavailable, faults.LostResponse}, svc.Armed())
	require.Equal(t, "service(queryable): armed [service_unavailable lost_response]; fired lost_response=0 service_unavailable=0 lost_response_refused=0", svc.String())

	_, err := svc.Call(ctx, worker.Call{OpID: "op-1"})
	require.ErrorIs(t, err, worker.ErrUnavailable)
	_, err = svc.Call(ctx, worker.Call{OpID: "op-1"})
	requireInjected(t, err, "lost_response")
	_, err = svc.Call(ctx, worker.Call{OpID: "op-1"})
	require.NoError(t, err)
	require.Equal(t, 2, inner.Applications("op-1"))
	require.Equal(t, "service(queryable): armed []; fired lost_response=1 service_unavailable=1 lost_response_refused=0", svc.String())

	svc.ArmLostResponse()
	svc.Disarm()
	require.Empty(t, svc.Armed())
	_, err = svc.Call(ctx, worker.Call{OpID: "op-2"})
	require.NoError(t, err)
}

// refusingService refuses every call with err, applying nothing.
type refusingService struct {
	err   error
	calls int
}

func (s *refusingService) Kind() worker.ServiceKind { return worker.Fenced }

func (s *refusingService) Call(context.Context, worker.Call) (string, error) {
	s.calls++
	return "", s.err
}

func (s *refusingService) Status(context.Context, string, int64) (bool, string, error) {
	return false, "", nil
}

// A lost response on a call the service refused (not applied) passes the
// refusal on: a timeout would read as a possible application. The fault is
// spent and counted apart; the next call is not affected.
func TestServiceLostResponseOnARefusedCall(t *testing.T) {
	for _, refusal := range []error{worker.ErrStaleFence, worker.ErrUnavailable} {
		t.Run(refusal.Error(), func(t *testing.T) {
			ctx := context.Background()
			inner := &refusingService{err: fmt.Errorf("operation op-1: %w", refusal)}
			svc := faults.NewService(inner)
			svc.ArmLostResponse()
			_, err := svc.Call(ctx, worker.Call{OpID: "op-1", Fence: 1})
			require.Equal(t, inner.err, err, "the service's own refusal")
			require.NotErrorIs(t, err, faults.ErrInjected)
			require.Equal(t, 1, inner.calls, "forwarded")
			require.Empty(t, svc.Armed(), "the fault is spent")
			require.Equal(t, faults.ServiceCounts{LostResponseRefused: 1}, svc.Counts())
			require.Equal(t, "service(fenced): armed []; fired lost_response=0 service_unavailable=0 lost_response_refused=1", svc.String())

			_, err = svc.Call(ctx, worker.Call{OpID: "op-1", Fence: 1})
			require.Equal(t, inner.err, err)
			require.Equal(t, faults.ServiceCounts{LostResponseRefused: 1}, svc.Counts())
		})
	}
}

// A lost response on a call whose outcome the service itself left unknown
// still reads as a timeout: the reply, whatever it was, is lost.
func TestServiceLostResponseOnAnUnknownOutcome(t *testing.T) {
	inner := &refusingService{err: errors.New("connection reset")}
	svc := faults.NewService(inner)
	svc.ArmLostResponse()
	_, err := svc.Call(context.Background(), worker.Call{OpID: "op-1", Fence: 1})
	requireInjected(t, err, "lost_response")
	require.Equal(t, faults.ServiceCounts{LostResponse: 1}, svc.Counts())
}

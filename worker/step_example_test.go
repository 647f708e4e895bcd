package worker_test

import (
	"context"
	"log"
	"os"
	"os/signal"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/randomid"
	"github.com/leasehold/leasehold/worker"
	"github.com/leasehold/leasehold/worker/workertest"
)

// drive runs a worker of q by hand, a Step at a time, until ctx ends,
// then shuts it down: what the package doc's "Stepping a worker" shows
// (and TestPackageDocExampleIsCompiled holds it to).
func drive(ctx context.Context, q worker.Queue, svc worker.Service, clock clockwork.Clock) error {
	w, err := worker.New(worker.Config{ID: "w1", Queue: q, Handler: worker.Synthetic{}, Service: svc, Clock: clock})
	if err != nil {
		return err
	}
	for ctx.Err() == nil {
		if r := w.Step(ctx); r.Wait > 0 {
			clock.Sleep(r.Wait) // a simulator advances its fake clock instead
		}
	}
	w.Shutdown() // stop claiming; finish runs and effects in flight, release the rest
	for !w.Drained() {
		if r := w.Step(context.WithoutCancel(ctx)); r.Wait > 0 {
			clock.Sleep(r.Wait)
		}
	}
	return nil
}

// ExampleWorker_Step steps a worker by hand over a queue in memory until
// the process is interrupted.
func ExampleWorker_Step() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	clock := clockwork.NewRealClock()
	q, err := queue.Open(ctx, queue.Options{Path: queue.Memory, Clock: clock, IDs: randomid.Source{}})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	if _, err := q.Submit(ctx, model.SubmitRequest{User: "ana", Key: "k1", Payload: `{"steps":[{"cost":1}]}`, CostBudget: 5, StepsMax: 2}); err != nil {
		log.Fatal(err)
	}
	if err := drive(ctx, q, workertest.NewService(worker.Dedup, clock), clock); err != nil {
		log.Fatal(err)
	}
}

package queue_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/randomid"
)

// submitAndWork is README's tour of the queue from Go (its test holds the
// README to this copy).
func submitAndWork(ctx context.Context, path string, clock clockwork.Clock) (model.Task, error) {
	q, err := queue.Open(ctx, queue.Options{
		Path:  path,
		Clock: clock,
		IDs:   randomid.Source{},                                   // crypto-random task and schedule IDs
		Rand:  rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())), // backoff jitter
	})
	if err != nil {
		return model.Task{}, err
	}
	defer q.Close()

	// A caller submits and gets an ID at once. The same request again under the
	// same key is an exact replay (same ID, Replay: true); a changed request under
	// that key is refused with queue.ErrIdempotencyConflict.
	res, err := q.Submit(ctx, model.SubmitRequest{
		User: "ana", Key: "invoice-42",
		Payload:    `{"steps":[{"cost":2},{"cost":5,"effect":"charge"}]}`,
		CostBudget: 10, StepsMax: 5,
	})
	if err != nil {
		return model.Task{}, err
	}

	// A worker claims under a lease; the claim's fence guards every later write,
	// and a write under a fence no longer current fails with queue.ErrStaleClaim
	// and changes nothing.
	claims, err := q.Claim(ctx, model.ClaimRequest{Worker: "w1", Max: 1, Lease: 30 * time.Second})
	if err != nil {
		return model.Task{}, err
	}
	if len(claims) == 0 {
		return model.Task{}, errors.New("nothing to claim")
	}
	c := claims[0].Claim
	hb, err := q.Heartbeat(ctx, c, 30*time.Second) // extends the lease
	if err != nil {
		return model.Task{}, err
	}
	if hb.CancelRequested {
		return q.Task(ctx, c.TaskID) // a worker stops here (AcknowledgeCancel)
	}
	if _, err := q.CompleteStep(ctx, model.StepWrite{Claim: c, Index: 0, Cost: 2}); err != nil {
		return model.Task{}, err
	}
	intent, err := q.RecordIntent(ctx, c, 1) // before a customer-visible call
	if err != nil {
		return model.Task{}, err
	}
	if err := q.RecordReceipt(ctx, c, intent.OpID, "receipt-1"); err != nil { // after it
		return model.Task{}, err
	}
	if _, err := q.CompleteStep(ctx, model.StepWrite{Claim: c, Index: 1, Cost: 5}); err != nil {
		return model.Task{}, err
	}
	if err := q.Complete(ctx, c); err != nil {
		return model.Task{}, err
	}
	return q.Task(ctx, res.TaskID) // state, reason, attempts, budget used, ...
}

// Example runs README's tour on a new file, under a fake clock.
func Example() {
	dir, err := os.MkdirTemp("", "leasehold-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	t, err := submitAndWork(context.Background(), filepath.Join(dir, "leasehold.db"), clockwork.NewFakeClock())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: cost %d of %d, %d of %d steps\n", t.State, t.CostUsed, t.CostBudget, t.StepsUsed, t.StepsMax)
	// Output: completed: cost 7 of 10, 2 of 5 steps
}

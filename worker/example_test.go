package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/randomid"
	"github.com/leasehold/leasehold/worker"
)

// A worker process: it opens the queue, runs a handler of its own (the
// simple form, which needs no Service) under a Runner that also does the
// queue's housekeeping, and shuts down gracefully on SIGTERM.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	clock := clockwork.NewRealClock()
	q, err := queue.Open(ctx, queue.Options{Path: "leasehold.db", Clock: clock, IDs: randomid.Source{}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	defer q.Close()

	// The step's operation ID is the same on every attempt: hand it to the
	// mail service as its idempotency key. The call is the function's own,
	// outside the effects ledger.
	send := worker.HandlerFunc(func(ctx context.Context, task model.Task, opID string) (string, error) {
		if err := sendMail(ctx, task.Payload, opID); err != nil {
			return "", fmt.Errorf("%w: %v", worker.ErrTransient, err) // retried after a backoff
		}
		return "sent", nil
	})
	r, err := worker.NewRunner(worker.Config{
		ID:          "mailer-1",
		Queue:       q,
		Handler:     send,
		Clock:       clock,
		Logger:      slog.New(slog.NewJSONHandler(os.Stderr, nil)),
		Concurrency: 4,
		Lease:       30 * time.Second,
		StepTimeout: 10 * time.Minute,
	}, worker.RunOptions{Housekeeper: q, ShutdownGrace: 20 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	if err := r.Run(ctx); errors.Is(err, worker.ErrClaimsLeft) {
		fmt.Fprintln(os.Stderr, "stopped, leaving claims to the reaper:", err)
	}
}

// sendMail stands for the program's own call to a mail service that
// deduplicates by key.
func sendMail(ctx context.Context, payload, key string) error { return ctx.Err() }

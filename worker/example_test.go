package worker_test

import (
	"context"
	"encoding/json"
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

// serveTwoKinds is README's worker of two kinds of its own (its test holds
// the README to this copy).
func serveTwoKinds(ctx context.Context, path string) error {
	clock := clockwork.NewRealClock()
	kinds := worker.Kinds{
		"report": {Handler: worker.HandlerFunc(writeReport), Validate: checkReport},
		"email":  {Handler: worker.HandlerFunc(sendEmail)},
	}
	q, err := queue.Open(ctx, queue.Options{Path: path, Clock: clock, IDs: randomid.Source{},
		Validators: kinds.Validators()}) // a payload its handler could not run is refused at submit
	if err != nil {
		return err
	}
	defer q.Close()
	_, err = q.Submit(ctx, model.SubmitRequest{User: "ana", Key: "report-2026-03", Kind: "report",
		Payload: `{"month":"2026-03"}`, CostBudget: 1, StepsMax: 1})
	if err != nil {
		return err
	}
	// No Service: no step declares a ledgered effect.
	r, err := worker.NewRunner(worker.Config{ID: "w1", Queue: q, Handler: kinds, Clock: clock},
		worker.RunOptions{Housekeeper: q})
	if err != nil {
		return err
	}
	return r.Run(ctx) // claims report and email tasks only, until ctx is done
}

// writeReport is the report kind's handler: what it returns is the step's
// checkpoint, shown with the task.
func writeReport(ctx context.Context, task model.Task, opID string) (string, error) {
	var p struct {
		Month string `json:"month"`
	}
	if err := json.Unmarshal([]byte(task.Payload), &p); err != nil {
		return "", fmt.Errorf("%w: %v", worker.ErrPermanent, err)
	}
	return "report for " + p.Month + " written", nil
}

// sendEmail is the email kind's handler; opID is the idempotency key to
// give the mail service (the call is outside the effects ledger).
func sendEmail(ctx context.Context, task model.Task, opID string) (string, error) {
	if err := sendMail(ctx, task.Payload, opID); err != nil {
		return "", fmt.Errorf("%w: %v", worker.ErrTransient, err)
	}
	return "sent", nil
}

// checkReport refuses a report payload without a month, naming the field
// and never its value.
func checkReport(payload json.RawMessage) error {
	var p struct {
		Month string `json:"month"`
	}
	if json.Unmarshal(payload, &p) != nil || p.Month == "" {
		return &model.ValidationError{Field: "month", Problem: "required: a month as YYYY-MM"}
	}
	return nil
}

// A worker of two kinds of the program's own, each a HandlerFunc, with no
// Service (serveTwoKinds).
func Example_kinds() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serveTwoKinds(ctx, "leasehold.db"); err != nil && !errors.Is(err, worker.ErrClaimsLeft) {
		fmt.Fprintln(os.Stderr, err)
	}
}

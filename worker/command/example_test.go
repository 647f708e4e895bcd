package command_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/kinds"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/randomid"
	"github.com/leasehold/leasehold/worker"
	"github.com/leasehold/leasehold/worker/command"
)

// A worker process that runs one kind of a kinds file by its command.
// The handler needs no Service: the command's effect is under the
// queue's ledger, settled by the kind's service kind. Once the Runner
// has returned, the worker waits for any command its shutdown cut short.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	clock := clockwork.NewRealClock()
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	f, err := kinds.Load("kinds.json")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	report, ok := f.Kind("report")
	if !ok {
		fmt.Fprintln(os.Stderr, "kinds.json has no kind report")
		return
	}
	h, err := command.FromKind(report, clock, logger)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	q, err := queue.Open(ctx, queue.Options{Path: "leasehold.db", Clock: clock, IDs: randomid.Source{}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	defer q.Close()
	r, err := worker.NewRunner(worker.Config{ID: "reports-1", Queue: q, Handler: h, Clock: clock, Logger: logger},
		worker.RunOptions{Housekeeper: q})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	err = r.Run(ctx)
	wait, cancel := context.WithTimeout(context.Background(), h.Grace())
	defer cancel()
	_ = h.Wait(wait)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
}

// Command leasehold is the one binary of leasehold: callers, approvers and
// operators use it against the queue's database, workers and the HTTP API
// run under it, and the simulator, the demo and the evidence report start
// from it. The commands live in package cli; this is only their entry.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(cli.Run(ctx, os.Stdout, os.Stderr, os.Args[1:]))
}

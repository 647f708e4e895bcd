// Command embed is a Go program of its own that embeds leasehold: a small
// billing office that runs two kinds of task with its own handlers, and
// serves the HTTP API and the console on its own mux with its own tokens.
//
//   - report, the simple form (worker.HandlerFunc): {"month": "2026-03"}
//     becomes one step whose result is the report's line.
//   - invoice, the planned form (worker.Handler): {"customer": "acme",
//     "lines": [{"item": "paper", "quantity": 2, "cents": 450}]} becomes
//     two steps of cost 1 each, totalling the lines and then writing the
//     invoice; the second reads the first's checkpoint.
//
// Each kind has a validator of its own, given to the queue and to the API,
// so a payload its handler could not run is refused at submit with a 400
// naming the path inside the payload ("payload.lines[0].quantity"), and
// nothing is written; a kind the program does not serve is refused too.
//
// The program defines two tokens, their secrets taken from the
// environment so that none is in its code or on its command line:
//
//   - clerk (EMBED_CLERK_SECRET) may submit, for the users acme and
//     globex only;
//   - manager (EMBED_MANAGER_SECRET) may submit, approve and operate, for
//     every user.
//
// Run it with a SQLite file (made when there is none) and an address:
//
//	EMBED_CLERK_SECRET=... EMBED_MANAGER_SECRET=... go run ./examples/embed --db embed.db --addr 127.0.0.1:8080
//
// It prints the URL it serves on its first line of output; the API is
// under /v1/, the console under /ui/. SIGINT or SIGTERM stops it
// gracefully: the worker finishes or releases what it holds, open
// long-polls end, and it exits 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/console"
	"github.com/leasehold/leasehold/httpapi"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/randomid"
	"github.com/leasehold/leasehold/worker"
)

// The environment variables that hold the tokens' secrets.
const (
	clerkSecretEnv   = "EMBED_CLERK_SECRET"
	managerSecretEnv = "EMBED_MANAGER_SECRET"
)

// workerID names the program's worker in claims and events.
const workerID = "embed-worker"

// shutdownGrace bounds the worker's drain once the program is told to
// stop.
const shutdownGrace = 10 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "embed:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// errUsage marks a mistake on the command line or in the environment.
var errUsage = errors.New("usage")

// run is the program: it parses args, opens the queue, starts the worker
// and serves the API and the console until ctx is done.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("embed", flag.ContinueOnError)
	flags.SetOutput(stderr)
	addr := flags.String("addr", "127.0.0.1:8080", "address to serve the API and the console on")
	db := flags.String("db", "embed.db", "the queue: a SQLite file (made when there is none) or a PostgreSQL URL")
	if err := flags.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	tokens, err := programTokens(getenv)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	logger := slog.New(slog.NewJSONHandler(stderr, nil))
	clock := clockwork.NewRealClock()
	kinds := worker.Kinds{
		"report":  {Handler: worker.HandlerFunc(writeReport), Validate: checkReport},
		"invoice": {Handler: invoices{}, Validate: checkInvoice},
	}

	q, err := queue.Open(ctx, queue.Options{Path: *db, Clock: clock, IDs: randomid.Source{},
		Rand:        rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())), // backoff jitter
		Validators:  kinds.Validators(),                                  // a payload its handler could not run is refused
		UnknownKind: refuseKind})                                         // so is a kind nobody here runs
	if err != nil {
		return fmt.Errorf("open the queue: %w", err)
	}
	defer q.Close()

	api, err := httpapi.New(httpapi.Options{Queue: q, Tokens: tokens, Validators: kinds.Validators(), Logger: logger, Clock: clock})
	if err != nil {
		return fmt.Errorf("the API: %w", err)
	}
	ui, err := console.New(console.Options{API: api, Logger: logger})
	if err != nil {
		return fmt.Errorf("the console: %w", err)
	}
	defer ui.Close()
	mux := http.NewServeMux()
	api.Mount(mux)                 // /v1/, /openapi.json, /metrics, /healthz
	mux.Handle(console.Prefix, ui) // /ui/
	mux.HandleFunc("GET /{$}", home)

	runner, err := worker.NewRunner(worker.Config{ID: workerID, Queue: q, Handler: kinds, Clock: clock, Logger: logger,
		Concurrency: 2, Lease: 30 * time.Second, StepTimeout: time.Minute},
		worker.RunOptions{Housekeeper: q, ShutdownGrace: shutdownGrace})
	if err != nil {
		return fmt.Errorf("the worker: %w", err)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("%w: --addr: %v", errUsage, err)
	}
	fmt.Fprintf(stdout, "embed: serving http://%s (the API under /v1/, the console under /ui/)\n", ln.Addr())

	// The worker runs until the server stops: when ctx is done, or when
	// the server fails on its own.
	working, stopWorking := context.WithCancel(ctx)
	defer stopWorking()
	worked := make(chan error, 1)
	go func() { worked <- runner.Run(working) }()
	served := api.Serve(ctx, ln, mux)
	stopWorking()
	return errors.Join(served, <-worked)
}

// programTokens are the program's two tokens, their secrets read through
// getenv.
func programTokens(getenv func(string) string) ([]httpapi.Token, error) {
	clerkSecret, managerSecret := getenv(clerkSecretEnv), getenv(managerSecretEnv)
	if clerkSecret == "" || managerSecret == "" {
		return nil, fmt.Errorf("set %s and %s to the tokens' secrets (16 characters or more each)", clerkSecretEnv, managerSecretEnv)
	}
	clerk, err := httpapi.NewToken("clerk", clerkSecret, []string{model.ScopeSubmit}, []string{"acme", "globex"})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", clerkSecretEnv, err)
	}
	manager, err := httpapi.NewToken("manager", managerSecret,
		[]string{model.ScopeSubmit, model.ScopeApprove, model.ScopeOperate}, []string{httpapi.AllUsers})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", managerSecretEnv, err)
	}
	return []httpapi.Token{clerk, manager}, nil
}

// refuseKind refuses, at submit, a kind the program has no handler for
// (the synthetic kind included).
func refuseKind(kind string) error {
	return &model.ValidationError{Field: "kind", Problem: kind + " is not served here (report or invoice)"}
}

// home is the program's own page, beside the API and the console.
func home(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "embed: a billing office on leasehold. The API is under /v1/ (/openapi.json describes it); the console is at /ui/.")
}

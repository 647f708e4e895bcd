package cli

import (
	"flag"
	"log/slog"
	"net"
	"net/http"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/console"
	"github.com/leasehold/leasehold/cmd/leasehold/internal/httpapi"
	"github.com/leasehold/leasehold/queue"
)

func init() {
	register("serve", "the HTTP JSON API, the console at /ui/, /metrics and /healthz: serve --addr 127.0.0.1:PORT --tokens FILE", runServe)
}

func runServe(e *env, args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c := commonFlags(fs, false)
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on")
	tokensFile := fs.String("tokens", "", "file of NAME SCOPES SECRET USERS lines (or set LEASEHOLD_TOKENS)")
	strict := fs.Bool("strict-tokens", false, "refuse a token line without USERS (otherwise it acts for every user, with a warning)")
	if err := parse(fs, args); err != nil {
		return fail(e, "serve", err)
	}
	if _, _, err := net.SplitHostPort(*addr); err != nil {
		return fail(e, "serve", badUsage("--addr: %v", err))
	}
	tokens, err := httpapi.LoadTokens(*tokensFile, *strict)
	if err != nil {
		return fail(e, "serve", badUsage("%v", err))
	}
	q, err := openExisting(e.ctx, c)
	if err != nil {
		return fail(e, "serve", err)
	}
	defer q.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fail(e, "serve", err)
	}
	logger := slog.New(slog.NewJSONHandler(e.stderr, nil))
	api, err := newServer(q, tokens, logger, clockwork.NewRealClock())
	if err != nil {
		return fail(e, "serve", err)
	}
	if err := httpapi.Serve(e.ctx, ln, api); err != nil {
		return fail(e, "serve", err)
	}
	return exitOK
}

// newServer is the API's server of q with the console mounted at /ui/
// over the API's own cores.
func newServer(q *queue.Queue, tokens []httpapi.Token, logger *slog.Logger, clock clockwork.Clock, opts ...httpapi.Option) (*httpapi.Server, error) {
	var ui http.Handler = http.NotFoundHandler() // set below, before Serve builds the routes
	opts = append([]httpapi.Option{httpapi.WithClock(clock), httpapi.WithMount(func(m *http.ServeMux) { m.Handle(console.Prefix, ui) })}, opts...)
	api := httpapi.New(q, tokens, logger, opts...)
	c, err := console.New(console.Options{Backend: console.FromAPI(api, q, clock), Clock: clock, Logger: logger})
	if err != nil {
		return nil, err
	}
	ui = c
	return api, nil
}

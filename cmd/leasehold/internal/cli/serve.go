package cli

import (
	"flag"
	"log/slog"
	"net"
	"net/http"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/console"
	"github.com/leasehold/leasehold/httpapi"
)

func init() {
	register("serve", "the HTTP JSON API, the console at /ui/, /metrics and /healthz: serve --addr 127.0.0.1:PORT --tokens FILE [--kinds FILE]", runServe)
}

func runServe(e *env, args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c := commonFlags(fs, false)
	kindsFlag(fs, &c)
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
	kindNames, err := c.kindNames()
	if err != nil {
		return fail(e, "serve", err)
	}
	// The queue validates payloads (the synthetic handler's and the kinds
	// file's schemas, openQueue): the API adds no check of its own. Its
	// metrics name the kinds the file names.
	srv, err := newServer(httpapi.Options{Queue: q, Tokens: tokens, Logger: slog.New(slog.NewJSONHandler(e.stderr, nil)),
		Clock: clockwork.NewRealClock(), Kinds: kindNames})
	if err != nil {
		return fail(e, "serve", err)
	}
	defer srv.Close()
	if err := srv.api.Serve(e.ctx, ln, srv.mux); err != nil {
		return fail(e, "serve", err)
	}
	return exitOK
}

// server is what serve serves: the HTTP API and the console over the
// API's cores, mounted on one mux as any Go program mounts them.
type server struct {
	api *httpapi.Server
	ui  *console.Console
	mux *http.ServeMux
}

// newServer builds serve's server from the API's options.
func newServer(o httpapi.Options) (server, error) {
	api, err := httpapi.New(o)
	if err != nil {
		return server{}, err
	}
	ui, err := console.New(console.Options{API: api, Logger: o.Logger})
	if err != nil {
		return server{}, err
	}
	mux := http.NewServeMux()
	api.Mount(mux)
	// The console's pages answer within the API's request timeout, as the
	// API's ordinary routes do.
	mux.Handle(console.Prefix, http.TimeoutHandler(ui, httpapi.DefaultTimeouts().Request, consoleTimedOut))
	return server{api: api, ui: ui, mux: mux}, nil
}

// consoleTimedOut is the console's answer to a request past the timeout.
const consoleTimedOut = "The console took too long to answer; nothing is known to have changed. Retry later."

// Close stops the console's sampling of the queue's metrics.
func (s server) Close() { s.ui.Close() }

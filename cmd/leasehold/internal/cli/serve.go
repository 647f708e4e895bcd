package cli

import (
	"flag"
	"log/slog"
	"net"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/httpapi"
	"github.com/leasehold/leasehold/queue"
)

func init() {
	register("serve", "the HTTP JSON API, /metrics and /healthz: serve --addr 127.0.0.1:PORT --tokens FILE", runServe)
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
	q, err := openQueue(e.ctx, c, queue.MigrateNew)
	if err != nil {
		return fail(e, "serve", err)
	}
	defer q.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fail(e, "serve", err)
	}
	logger := slog.New(slog.NewJSONHandler(e.stderr, nil))
	if err := httpapi.Serve(e.ctx, ln, httpapi.New(q, tokens, logger)); err != nil {
		return fail(e, "serve", err)
	}
	return exitOK
}

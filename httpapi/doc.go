// Package httpapi is leasehold's HTTP JSON API over one queue: the routes
// of /v1, bearer tokens bound to users and their scopes, request bodies
// and their refusals, long-polls and the audit trail as Server-Sent
// Events, the OpenAPI document, /metrics for Prometheus and /healthz. Its
// records are package wire's, which package client reads.
//
// The handlers' cores (Server.Submit, Server.List, Server.Approve, ...)
// are plain Go calls taking a Principal, so another face (package
// console) authorizes exactly as the API does.
//
// # Usage
//
// A Go program serves the API of its own queue, with its own tokens and
// payload rule, on its own mux beside its own routes, and the console
// with it (Example runs this):
//
//	api, err := httpapi.New(httpapi.Options{Queue: q, Tokens: tokens,
//		Validators: map[string]model.PayloadValidator{"invoice": checkInvoice}})
//	if err != nil {
//		return err
//	}
//	ui, err := console.New(console.Options{API: api})
//	if err != nil {
//		return err
//	}
//	defer ui.Close()
//	mux := http.NewServeMux()
//	api.Mount(mux)                 // /v1/, /openapi.json, /metrics, /healthz
//	mux.Handle(console.Prefix, ui) // /ui/
//	mux.HandleFunc("GET /{$}", home)
//	return api.Serve(ctx, ln, mux) // until ctx is done
//
// Tokens come from ParseTokens or LoadTokens (lines of NAME SCOPES SECRET
// USERS, as leasehold serve reads them), or from NewToken, for a program
// that defines its users and scopes in code (examples/embed does). Serve runs the mux with the
// server's Timeouts and shuts down gracefully; a program with an
// http.Server of its own serves Server.RefuseDotSegments(mux) there (a
// ServeMux would redirect a path with a ".." segment to another resource)
// and registers Server.Close with its RegisterOnShutdown, so that open
// long-polls and event streams end. leasehold serve is such a program.
//
// # Payloads
//
// A payload is a JSON object of the task's kind; the queue checks what
// its queue.Options.Validators say for that kind, and Options.Validators
// add the program's rules at the API (and so at the console) before the
// queue is called. A kind without a validator accepts any object. A
// refusal is a 400 naming the path inside the payload
// ("payload.amount"), and nothing is written.
//
// # The document
//
// Document is the OpenAPI 3 document of the routes, served at
// /openapi.json; the tests hold every request and answer of theirs to it.
// Its payloads are free-form objects and its records only gain fields, so
// a client written against it keeps working as the API grows.
package httpapi

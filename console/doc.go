// Package console is the web console of leasehold at /ui/: server-rendered
// html/template pages for submitters, approvers and operators, readable
// without JavaScript and built with no JavaScript step.
//
// The console holds no authority of its own. Every read and action goes
// through a Backend, by default the HTTP API's own authorization and
// handler cores (FromAPI: scopes and the users a token may act for),
// called with the Principal of the person signed in; it reads nothing
// but through them. The console only decides what to show: a submitter
// is never offered an approve button, but it is the Backend that refuses
// an approval the principal may not make.
//
// # Sessions
//
// Signing in with a token creates a fresh server-side session; the
// browser holds only a random session ID in an HttpOnly, SameSite=Strict
// cookie scoped to /ui/. Sessions expire after an idle period and after an
// absolute lifetime, both on the injected clock, and are revoked at sign
// out. The token itself is kept by nobody: it is checked once and
// forgotten, and it never appears in a URL.
//
// # Forged requests
//
// Every form carries the session's CSRF token, and every POST must bring
// it back; a POST whose Origin (or Sec-Fetch-Site) says it comes from
// another origin is refused with 403 before its form is read. Refused
// requests write nothing.
//
// # Usage
//
// A program makes the console of its HTTP API's server (httpapi.New) and
// mounts it at Prefix on its mux, beside the API (package httpapi's
// example runs the whole program):
//
//	ui, err := console.New(console.Options{API: api})
//	if err != nil {
//		return err
//	}
//	defer ui.Close()
//
// Close stops the console's sampling of the queue's metrics for the Live
// page; the pages keep answering with the history taken so far.
package console

// Package console is the web console of leasehold at /ui/: server-rendered
// html/template pages for submitters, approvers and operators, readable
// without JavaScript and built with no JavaScript step.
//
// The console holds no authority of its own. Every read and action goes
// through a Backend, the same authorization and handler cores as the HTTP
// API (scopes and the users a token may act for), called with the
// Principal of the person signed in. The console only decides what to
// show: a submitter is never offered an approve button, but it is the
// Backend that refuses an approval the principal may not make.
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
//	c, err := console.New(console.Options{Backend: b, Clock: clock})
//	mux.Handle("/ui/", c)
package console

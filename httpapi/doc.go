// Package httpapi is leasehold's HTTP JSON API over one queue: the routes
// of /v1, bearer tokens bound to users and their scopes, request bodies
// and their refusals, long-polls and the audit trail as Server-Sent
// Events, the OpenAPI document, /metrics for Prometheus and /healthz. Its
// records are package wire's, which package client reads.
//
// The handlers' cores (Server.Submit, Server.List, Server.Approve, ...)
// are plain Go calls taking a Principal, so another face (package
// console) authorizes exactly as the API does.
package httpapi

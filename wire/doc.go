// Package wire is the JSON records leasehold's HTTP API sends and takes,
// shared by the server (package httpapi), its Go client (package client)
// and the command line's --json output: tasks, audit events, pages,
// inspections, limits, schedules, the answers to submits and settlements,
// health and the error body of every refusal.
//
// Fields are snake_case; times are RFC 3339 in UTC, or "" for none (Time).
// A record of the server's is built from the queue's by its Of function
// (TaskOf, EventOf, ScheduleOf, LimitsViewOf); a request body keeps its
// times as the strings sent, so that the server can name the field of one
// it cannot read (ParseTime).
//
// Fields are only ever added: a program that reads a record keeps reading
// it when a later server sends more.
package wire

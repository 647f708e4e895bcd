package client

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Sentinel errors, matched by an *Error under errors.Is according to its
// code (and, for ErrConflict, to any 409).
var (
	// ErrBadInput: the request was malformed or a field out of range
	// (400); Error.Field names the field.
	ErrBadInput = errors.New("bad input")
	// ErrUnauthorized: no valid bearer token (401).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrForbidden: the token lacks the scope, or acts for another user
	// (403).
	ErrForbidden = errors.New("forbidden")
	// ErrNotFound: no such task, effect or schedule, or one of a user the
	// token does not act for (404).
	ErrNotFound = errors.New("not found")
	// ErrMethodNotAllowed: the route does not take this method (405).
	ErrMethodNotAllowed = errors.New("method not allowed")
	// ErrConflict: the request conflicts with the stored state (409): a
	// used idempotency key, a stale version, a transition the task's
	// state does not allow.
	ErrConflict = errors.New("conflict")
	// ErrVersionMismatch: an approval or a rejection named a version
	// other than the task's (409, code version_mismatch); it also matches
	// ErrConflict.
	ErrVersionMismatch = errors.New("version mismatch")
	// ErrTooLarge: the request body is over the server's limit (413).
	ErrTooLarge = errors.New("request too large")
	// ErrQueueFull: a depth cap refused the submit (429, code
	// queue_full); Error.RetryAfter says when to try again.
	ErrQueueFull = errors.New("queue full")
	// ErrTooManyStreams: the token has as many event streams open as the
	// server allows (429, code too_many_streams); Error.RetryAfter says
	// when to try again.
	ErrTooManyStreams = errors.New("too many streams")
	// ErrUnavailable: storage failed or the request timed out (503); the
	// call may be retried.
	ErrUnavailable = errors.New("unavailable")
	// ErrStreamEnded: the server ended an event stream (shut down), or
	// the connection was lost; Follow can be called again to resume.
	ErrStreamEnded = errors.New("event stream ended")
)

// Error is a refusal from the server: the JSON error body of a non-2xx
// response.
type Error struct {
	Status  int    // HTTP status
	Code    string // the API's error code: bad_input, not_found, version_mismatch, ...
	Field   string // the field or path value the refusal is about, if any
	Message string // the server's one-line message
	// RetryAfter is how long the server asks the caller to wait before
	// trying again (its Retry-After header, on a 429: ErrQueueFull,
	// ErrTooManyStreams); 0 when it names no time.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("leasehold: %d %s", e.Status, e.Code)
	if e.Field != "" {
		msg += " (field " + e.Field + ")"
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	if e.RetryAfter > 0 {
		msg += fmt.Sprintf(" (retry after %s)", e.RetryAfter)
	}
	return msg
}

// retryAfterMax bounds the wait a Retry-After header may ask for.
const retryAfterMax = 24 * time.Hour

// retryAfter reads a response's Retry-After header: a count of seconds,
// or an HTTP date taken against the response's own Date header (the
// package reads no clock). 0 when there is none, it cannot be read, or
// it asks for more than retryAfterMax.
func retryAfter(h http.Header) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 || n > int64(retryAfterMax/time.Second) {
			return 0
		}
		d = time.Duration(n) * time.Second
	} else {
		at, err := http.ParseTime(v)
		if err != nil {
			return 0
		}
		now, err := http.ParseTime(h.Get("Date"))
		if err != nil {
			return 0
		}
		d = at.Sub(now)
	}
	if d < 0 || d > retryAfterMax {
		return 0
	}
	return d
}

// codes maps the API's error codes to the sentinels.
var codes = map[string]error{
	"bad_input":          ErrBadInput,
	"unauthorized":       ErrUnauthorized,
	"forbidden":          ErrForbidden,
	"not_found":          ErrNotFound,
	"method_not_allowed": ErrMethodNotAllowed,
	"conflict":           ErrConflict,
	"version_mismatch":   ErrVersionMismatch,
	"invalid_transition": ErrConflict,
	"effect_receipted":   ErrConflict,
	"too_large":          ErrTooLarge,
	"queue_full":         ErrQueueFull,
	"too_many_streams":   ErrTooManyStreams,
	"unavailable":        ErrUnavailable,
	"timeout":            ErrUnavailable,
}

// statuses maps a status to its sentinel, for a body without a code.
var statuses = map[int]error{
	http.StatusBadRequest:            ErrBadInput,
	http.StatusUnauthorized:          ErrUnauthorized,
	http.StatusForbidden:             ErrForbidden,
	http.StatusNotFound:              ErrNotFound,
	http.StatusMethodNotAllowed:      ErrMethodNotAllowed,
	http.StatusConflict:              ErrConflict,
	http.StatusRequestEntityTooLarge: ErrTooLarge,
	http.StatusServiceUnavailable:    ErrUnavailable,
}

// Is matches the sentinel of e's code, or of its status when the code is
// not one this client knows; every 409 matches ErrConflict.
func (e *Error) Is(target error) bool {
	if target == ErrConflict && e.Status == http.StatusConflict {
		return true
	}
	if s, ok := codes[e.Code]; ok {
		return s == target
	}
	return statuses[e.Status] == target
}

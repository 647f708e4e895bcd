package httpapi

import (
	"errors"
	"net/http"
	"time"

	"github.com/leasehold/leasehold/model"
)

// Refusals of the API's own, beside the model's sentinels.
var (
	// ErrUnauthorized: no valid token was presented.
	ErrUnauthorized = errors.New("a valid bearer token is required")
	// ErrForbidden: the token lacks the scope, or asked to act for a user
	// its line does not name.
	ErrForbidden = errors.New("not allowed for this token")
	// errTooManyStreams: the token holds as many event streams as allowed.
	errTooManyStreams = errors.New("too many event streams open for this token")
	// errMethodNotAllowed and errNoRoute answer requests no route takes.
	errMethodNotAllowed = errors.New("method not allowed")
	errNoRoute          = errors.New("no such route")
)

// RetryAfter is how long a 429 asks its caller to wait before trying
// again, in its Retry-After header (whole seconds). Neither cap behind a
// 429 frees room at a time the server can name: a depth cap as workers
// finish tasks, the event stream cap as the token's streams close.
const RetryAfter = 5 * time.Second

// classify maps an error to its HTTP status and the API's error code
// (docs/API.md lists them).
func classify(err error) (int, string) {
	var maxBytes *http.MaxBytesError
	switch {
	case errors.As(err, &maxBytes):
		return http.StatusRequestEntityTooLarge, "too_large"
	case errors.Is(err, model.ErrInvalidInput):
		return http.StatusBadRequest, "bad_input"
	case errors.Is(err, ErrUnauthorized):
		return http.StatusUnauthorized, "unauthorized"
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden, "forbidden"
	case errors.Is(err, model.ErrNotFound), errors.Is(err, errNoRoute):
		return http.StatusNotFound, "not_found"
	case errors.Is(err, errMethodNotAllowed):
		return http.StatusMethodNotAllowed, "method_not_allowed"
	case errors.Is(err, model.ErrIdempotencyConflict):
		return http.StatusConflict, "conflict"
	case errors.Is(err, model.ErrVersionMismatch):
		return http.StatusConflict, "version_mismatch"
	case errors.Is(err, model.ErrInvalidTransition):
		return http.StatusConflict, "invalid_transition"
	case errors.Is(err, model.ErrEffectReceipted):
		return http.StatusConflict, "effect_receipted"
	case errors.Is(err, model.ErrQueueFull):
		return http.StatusTooManyRequests, "queue_full"
	case errors.Is(err, errTooManyStreams):
		return http.StatusTooManyRequests, "too_many_streams"
	case errors.Is(err, model.ErrBadIDSource):
		return http.StatusInternalServerError, "internal"
	}
	return http.StatusServiceUnavailable, "unavailable"
}

// statusOf maps an error to its HTTP status.
func statusOf(err error) int {
	status, _ := classify(err)
	return status
}

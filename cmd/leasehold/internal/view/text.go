// Package view is how the command line shows the queue to people and
// records what the API does not serve: durations as people read them, a
// task's cancellation note, and the metrics record (metrics --json, the
// demo's samples). The JSON records the command line shares with the
// HTTP API are package wire's.
package view

import (
	"fmt"
	"time"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/wire"
)

// Duration is d as people read it: milliseconds below a second ("850ms"),
// tenths of a second below a minute ("12.3s"), whole seconds above
// ("17m55s", "2h5m0s"). Records (--json, the API) keep milliseconds.
func Duration(d time.Duration) string {
	switch {
	case d < time.Second && d > -time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute && d > -time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// DurationMs is Duration of a count of milliseconds.
func DurationMs(ms int64) string { return Duration(time.Duration(ms) * time.Millisecond) }

// CancelNote is what a task's status says of its cancellation, "" when
// there is none: who cancelled it; or who asked, and that the task has
// yet to stop, or ended otherwise first.
func CancelNote(t model.Task) string {
	switch {
	case t.State == model.Cancelled && t.CancelledBy != "":
		return "cancelled by " + t.CancelledBy
	case t.State == model.Cancelled:
		return ""
	case wire.CancelPending(t):
		return fmt.Sprintf("requested by %s; the task stops before its next step", t.CancelledBy)
	case t.CancelRequested:
		return fmt.Sprintf("requested by %s; the task %s first", t.CancelledBy, t.State)
	}
	return ""
}

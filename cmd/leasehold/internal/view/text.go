package view

import (
	"fmt"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/model"
)

// ParseTime reads an RFC 3339 time of a request or batch line's field;
// "" is the zero time (not set).
func ParseTime(field, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, &model.ValidationError{Field: field, Problem: fmt.Sprintf("%s is not an RFC 3339 time", Quote(s, 64))}
	}
	if t.IsZero() { // the zero time is out of range, not "not set"
		return time.Time{}, model.CheckTimeRange(field, t)
	}
	return t, nil
}

// Quote quotes s for an error message: printable characters, whatever
// their script, as themselves; others escaped; at most n characters, the
// rest elided.
func Quote(s string, n int) string { return strconv.Quote(TruncateRunes(s, n)) }

// TruncateRunes cuts s to at most n characters, marking a cut with "...".
func TruncateRunes(s string, n int) string {
	count := 0
	for i := range s {
		if count == n {
			return s[:i] + "..."
		}
		count++
	}
	return s
}

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

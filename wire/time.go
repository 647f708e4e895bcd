package wire

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/model"
)

// Time is a time on the wire: RFC 3339 in UTC with its stored precision,
// or the empty string for none (the zero Time).
type Time struct{ time.Time }

// TimeOf is t on the wire.
func TimeOf(t time.Time) Time { return Time{t} }

// String is the time as it is sent: RFC 3339 UTC, or "" for the zero
// time.
func (t Time) String() string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// MarshalJSON writes RFC 3339 UTC, or "" for the zero time.
func (t Time) MarshalJSON() ([]byte, error) { return json.Marshal(t.String()) }

// UnmarshalJSON reads RFC 3339, or "" as the zero time.
func (t *Time) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("time: %w", err)
	}
	if s == "" {
		t.Time = time.Time{}
		return nil
	}
	parsed, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return fmt.Errorf("time: %w", err)
	}
	t.Time = parsed
	return nil
}

// ParseTime reads an RFC 3339 time of a request's field; "" is the zero
// time (not set). A time it cannot read is a *model.ValidationError
// naming field.
func ParseTime(field, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, &model.ValidationError{Field: field, Problem: fmt.Sprintf("%s is not an RFC 3339 time", model.Quote(s, 64))}
	}
	if t.IsZero() { // the zero time is out of range, not "not set"
		return time.Time{}, model.CheckTimeRange(field, t)
	}
	return t, nil
}

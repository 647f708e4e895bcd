package model

import "time"

// Backoff is the capped exponential retry delay with jitter. The n-th
// charged attempt waits between half and all of min(cap, Base·2^(n-1)),
// where cap is Max, or Base when Max is below Base (Max never cuts the
// span below Base), the point drawn from an injected random source in
// integer milliseconds. Base and Max count in whole milliseconds, Base as
// at least one.
type Backoff struct {
	Base time.Duration
	Max  time.Duration
}

// DefaultBackoff is the policy the queue uses unless told otherwise.
var DefaultBackoff = Backoff{Base: time.Second, Max: 5 * time.Minute}

// Delay returns the wait after the charged-th charged attempt (1-based),
// jittered by draw.
func (b Backoff) Delay(charged int, draw uint64) time.Duration {
	baseMs, maxMs := b.Base.Milliseconds(), b.Max.Milliseconds()
	if baseMs < 1 {
		baseMs = 1
	}
	if maxMs < baseMs {
		maxMs = baseMs
	}
	full := baseMs
	for i := 1; i < charged && full < maxMs; i++ {
		full *= 2
	}
	if full > maxMs {
		full = maxMs
	}
	half := full / 2
	jitter := int64(draw % uint64(full-half+1))
	return time.Duration(half+jitter) * time.Millisecond
}

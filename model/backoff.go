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

// KeyedRand is a Rand that can also draw for a key: the same key gives the
// same draw, however many other draws were made.
type KeyedRand interface {
	Rand
	KeyedUint64(key string) uint64
}

// DrawFor returns r's draw for key when r is a KeyedRand, and r's next
// draw otherwise (production's source).
func DrawFor(r Rand, key string) uint64 {
	if k, ok := r.(KeyedRand); ok {
		return k.KeyedUint64(key)
	}
	return r.Uint64()
}

// JitterKey is the key of the backoff draw made when the claim attempt of
// task ends in a charged attempt: one draw per claim.
func JitterKey(taskID string, attempt int) string { return AttemptID(taskID, attempt) }

// DerivedRand draws from a seed and a key by hashing (KeyedHash); Uint64,
// for callers with no key, counts a SplitMix64 sequence. It is not safe
// for concurrent use.
type DerivedRand struct {
	seed  uint64
	state uint64
}

var _ KeyedRand = (*DerivedRand)(nil)

// NewDerivedRand returns a DerivedRand for seed.
func NewDerivedRand(seed uint64) *DerivedRand { return &DerivedRand{seed: seed, state: seed} }

// Uint64 returns the next value of the sequence.
func (d *DerivedRand) Uint64() uint64 {
	d.state += 0x9e3779b97f4a7c15
	return KeyedHash(d.state, "")
}

// KeyedUint64 returns the draw for key.
func (d *DerivedRand) KeyedUint64(key string) uint64 { return KeyedHash(d.seed, key) }

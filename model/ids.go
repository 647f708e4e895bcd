package model

import (
	"fmt"
	"strconv"
	"time"
)

// IDSource hands out unique identifiers for tasks and schedules. The queue
// never invents IDs itself: production passes a source backed by the
// operating system's randomness, the simulator one derived from its seed.
type IDSource interface {
	// NewID returns a fresh identifier that starts with prefix.
	NewID(prefix string) string
}

// Rand is the random source the queue draws backoff jitter from.
// *math/rand/v2.Rand satisfies it.
type Rand interface {
	Uint64() uint64
}

// SeededIDs derives identifiers from a seed with a SplitMix64 sequence: the
// same seed gives the same IDs in the same order. It is not safe for
// concurrent use.
type SeededIDs struct {
	state uint64
}

// NewSeededIDs returns a SeededIDs starting from seed.
func NewSeededIDs(seed uint64) *SeededIDs { return &SeededIDs{state: seed} }

// NewID returns prefix followed by 16 hex digits.
func (s *SeededIDs) NewID(prefix string) string {
	s.state += 0x9e3779b97f4a7c15
	z := s.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return fmt.Sprintf("%s%016x", prefix, z)
}

// Task and schedule ID prefixes.
const (
	TaskIDPrefix     = "t_"
	ScheduleIDPrefix = "s_"
)

// OperationID derives the effects-ledger key of the effect made by a task's
// step. It is stable across retries of that step.
func OperationID(taskID string, step int) string {
	return taskID + ".s" + strconv.Itoa(step)
}

// AttemptID names one claim of one task.
func AttemptID(taskID string, attempt int) string {
	return taskID + ".a" + strconv.Itoa(attempt)
}

// KeyedIDSource is an IDSource that can also derive an identifier from a
// key, so that two parties holding equal sources (the queue and the
// simulator's reference model) give a task the same ID however many other
// IDs either has drawn.
type KeyedIDSource interface {
	IDSource
	// KeyedID returns the identifier for key, starting with prefix: the
	// same for the same prefix and key, every time.
	KeyedID(prefix, key string) string
}

// NewIDFor returns the identifier src derives for key when src is a
// KeyedIDSource, and a fresh one from src.NewID otherwise (production's
// random source).
func NewIDFor(src IDSource, prefix, key string) string {
	if k, ok := src.(KeyedIDSource); ok {
		return k.KeyedID(prefix, key)
	}
	return src.NewID(prefix)
}

// TaskKey is the key a task's ID is derived from: its user and idempotency
// key, which identify at most one task.
func TaskKey(user, key string) string { return user + "\x00" + key }

// ScheduleKey is the key a schedule's ID is derived from: its spec.
func ScheduleKey(s ScheduleSpec) string {
	return fmt.Sprintf("%s\x00%s\x00%d\x00%d\x00%d\x00%d\x00%d", s.User, s.Payload, s.CostBudget, s.StepsMax,
		s.Priority, Millis(s.Origin), s.Period.Milliseconds())
}

// DerivedIDs derives identifiers from a seed and a key by hashing: the same
// seed and key give the same ID, independent of the order IDs are asked
// for. Equal keys of a schedule spec are told apart by how often the key
// was asked for. NewID, for callers with no key, counts a SplitMix64
// sequence. It is not safe for concurrent use.
type DerivedIDs struct {
	seed    uint64
	fresh   SeededIDs
	repeats map[string]int
	// now, when set, is the clock whose instant (to the millisecond) a
	// task ID mixes in beside its key (NewDerivedIDsAt).
	now func() time.Time
}

var _ KeyedIDSource = (*DerivedIDs)(nil)

// NewDerivedIDs returns a DerivedIDs for seed.
func NewDerivedIDs(seed uint64) *DerivedIDs {
	return &DerivedIDs{seed: seed, fresh: SeededIDs{state: seed}, repeats: map[string]int{}}
}

// NewDerivedIDsAt returns a DerivedIDs for seed whose task IDs derive
// from the key and the instant now reads when the ID is drawn. A user's
// key names a second task once the tombstone a prune left of the first
// has expired; the two were submitted at different instants, so they get
// different IDs, as production's random ones are. Two parties drawing on
// the same clock (the simulator's queue and its reference) still give a
// task the same ID.
func NewDerivedIDsAt(seed uint64, now func() time.Time) *DerivedIDs {
	d := NewDerivedIDs(seed)
	d.now = now
	return d
}

// NewID returns prefix followed by 16 hex digits of the next sequence value.
func (d *DerivedIDs) NewID(prefix string) string { return d.fresh.NewID(prefix) }

// KeyedID returns prefix followed by 16 hex digits of the hash of the seed,
// prefix and key. A schedule key asked for again gets the hash of its n-th
// asking, so identical specs get distinct IDs; a task key, with a clock
// (NewDerivedIDsAt), the hash of the key at the clock's millisecond.
func (d *DerivedIDs) KeyedID(prefix, key string) string {
	switch {
	case prefix == ScheduleIDPrefix:
		n := d.repeats[key]
		d.repeats[key] = n + 1
		key += "\x00" + strconv.Itoa(n)
	case prefix == TaskIDPrefix && d.now != nil:
		key += "\x00" + strconv.FormatInt(Millis(d.now()), 10)
	}
	return fmt.Sprintf("%s%016x", prefix, KeyedHash(d.seed, prefix+"\x00"+key))
}

// KeyedHash mixes seed and key into 64 bits: FNV-1a over the key, started
// from the seed, then the SplitMix64 finalizer.
func KeyedHash(seed uint64, key string) uint64 {
	h := uint64(14695981039346656037) ^ seed
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	h += 0x9e3779b97f4a7c15
	h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9
	h = (h ^ (h >> 27)) * 0x94d049bb133111eb
	return h ^ (h >> 31)
}

package model

import (
	"fmt"
	"strconv"
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

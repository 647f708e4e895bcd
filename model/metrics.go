package model

import "time"

// HistogramBounds are the upper bounds (inclusive, milliseconds) of the
// buckets of the queue-wait and run-time distributions; a last bucket holds
// everything above.
var HistogramBounds = []int64{10, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000, 1_800_000}

// Histogram is a fixed-bucket distribution of durations in milliseconds.
type Histogram struct {
	// Counts[i] counts observations ≤ HistogramBounds[i] and above the
	// previous bound; Counts[len(HistogramBounds)] counts the rest.
	Counts []int64
	SumMs  int64
	Count  int64
}

// NewHistogram returns an empty histogram over HistogramBounds.
func NewHistogram() Histogram {
	return Histogram{Counts: make([]int64, len(HistogramBounds)+1)}
}

// BucketOf returns the bucket index of an observation of ms milliseconds.
func BucketOf(ms int64) int {
	for i, b := range HistogramBounds {
		if ms <= b {
			return i
		}
	}
	return len(HistogramBounds)
}

// Observe adds one observation.
func (h *Histogram) Observe(d time.Duration) {
	ms := d.Milliseconds()
	if ms < 0 {
		ms = 0
	}
	h.Counts[BucketOf(ms)]++
	h.SumMs += ms
	h.Count++
}

// Metrics is a snapshot of the queue's health, measured against the known
// population of submitted tasks: the depths by state and the tasks pruned
// sum to Submitted.
type Metrics struct {
	Depth           map[State]int64
	OldestQueuedAge time.Duration
	Submitted       int64
	Completions     int64
	Failures        int64
	Cancellations   int64
	Retries         int64
	LeaseExpiries   int64
	StaleWrites     int64
	BudgetExhausted int64
	Reviews         int64
	// Pruned counts the terminal tasks retention has removed: they are in
	// no depth any more, but were submitted.
	Pruned int64
	// QueueWait is measured from when a task became eligible (queued and
	// due) to its claim; RunTime from a claim to the end of that claim
	// (settled, paused, released or expired). Kept apart, they tell a task
	// that waited from one that stalled inside a step.
	QueueWait Histogram
	RunTime   Histogram
}

// Reconciles reports whether the depths and the tasks pruned account for
// every submitted task.
func (m Metrics) Reconciles() bool {
	total := m.Pruned
	for _, n := range m.Depth {
		total += n
	}
	return total == m.Submitted
}

// addCounts adds the event counts and the tasks pruned of o to m (not its
// depths or distributions).
func addCounts(m *Metrics, o Metrics) {
	m.Submitted += o.Submitted
	m.Completions += o.Completions
	m.Failures += o.Failures
	m.Cancellations += o.Cancellations
	m.Retries += o.Retries
	m.LeaseExpiries += o.LeaseExpiries
	m.StaleWrites += o.StaleWrites
	m.BudgetExhausted += o.BudgetExhausted
	m.Reviews += o.Reviews
	m.Pruned += o.Pruned
}

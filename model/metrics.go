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

// Counts are the outcome counters of Metrics, kept for one kind of task
// in Metrics.ByKind.
type Counts struct {
	Submitted       int64
	Completions     int64
	Failures        int64
	Cancellations   int64
	Retries         int64
	LeaseExpiries   int64
	StaleWrites     int64
	BudgetExhausted int64
	Reviews         int64
	Pruned          int64
}

// KindUnknown is the key of Metrics.ByKind that holds the counts whose
// task's kind is not known: the events of no task (a stale write naming a
// task that does not exist, or no longer does), and what was counted
// before the counts had kinds of tasks since pruned (the upgrade can
// recount only the tasks it still holds).
const KindUnknown = ""

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
	// ByKind holds the outcome counters by the kind of their task (an
	// event's task_kind; KindUnknown where that is not known): each
	// counter above is the sum of its counts here. A kind whose counts are
	// all zero is absent. It is never nil in a snapshot a queue returns.
	ByKind map[string]Counts
	// QueueWait is measured from when a task became eligible (queued and
	// due) to its claim; RunTime from a claim to the end of that claim
	// (settled, paused, released or expired). Kept apart, they tell a task
	// that waited from one that stalled inside a step.
	QueueWait Histogram
	RunTime   Histogram
}

// Reconciles reports whether the depths and the tasks pruned account for
// every submitted task, and whether the counts by kind sum to the totals.
func (m Metrics) Reconciles() bool {
	total := m.Pruned
	for _, n := range m.Depth {
		total += n
	}
	if total != m.Submitted {
		return false
	}
	var sum Counts
	for _, c := range m.ByKind {
		sum.Add(c)
	}
	return sum == m.Totals()
}

// Totals returns the outcome counters of m, over every kind.
func (m Metrics) Totals() Counts {
	return Counts{Submitted: m.Submitted, Completions: m.Completions, Failures: m.Failures,
		Cancellations: m.Cancellations, Retries: m.Retries, LeaseExpiries: m.LeaseExpiries,
		StaleWrites: m.StaleWrites, BudgetExhausted: m.BudgetExhausted, Reviews: m.Reviews, Pruned: m.Pruned}
}

// Add adds the counts of o to c.
func (c *Counts) Add(o Counts) {
	c.Submitted += o.Submitted
	c.Completions += o.Completions
	c.Failures += o.Failures
	c.Cancellations += o.Cancellations
	c.Retries += o.Retries
	c.LeaseExpiries += o.LeaseExpiries
	c.StaleWrites += o.StaleWrites
	c.BudgetExhausted += o.BudgetExhausted
	c.Reviews += o.Reviews
	c.Pruned += o.Pruned
}

// addTotals adds the counts of o to the totals of m (not to ByKind).
func (m *Metrics) addTotals(o Counts) {
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

// AddKind adds the counts of o to the counts of taskKind in m.ByKind
// (not to the totals), making the map if it is nil; zero counts add no
// entry.
func (m *Metrics) AddKind(taskKind string, o Counts) {
	if o == (Counts{}) {
		return
	}
	if m.ByKind == nil {
		m.ByKind = map[string]Counts{}
	}
	c := m.ByKind[taskKind]
	c.Add(o)
	m.ByKind[taskKind] = c
}

// addCounts adds the event counts, the tasks pruned and the counts by
// kind of o to m (not its depths or distributions).
func addCounts(m *Metrics, o Metrics) {
	m.addTotals(o.Totals())
	for k, c := range o.ByKind {
		m.AddKind(k, c)
	}
}

package view

import "github.com/leasehold/leasehold/model"

// Metrics is the metrics snapshot on the wire (metrics --json, the demo's
// samples).
type Metrics struct {
	Depth           map[string]int64 `json:"depth"`
	OldestQueuedMs  int64            `json:"oldest_queued_age_ms"`
	Submitted       int64            `json:"submitted"`
	Completions     int64            `json:"completions"`
	Failures        int64            `json:"failures"`
	Cancellations   int64            `json:"cancellations"`
	Retries         int64            `json:"retries"`
	LeaseExpiries   int64            `json:"lease_expiries"`
	StaleWrites     int64            `json:"stale_writes"`
	BudgetExhausted int64            `json:"budget_exhaustions"`
	Reviews         int64            `json:"reviews"`
	Pruned          int64            `json:"pruned"`
	QueueWait       Histogram        `json:"queue_wait_ms"`
	RunTime         Histogram        `json:"run_time_ms"`
}

// Histogram is a model.Histogram on the wire: the bucket bounds (ms),
// the counts per bucket (one more than the bounds), the sum and count.
type Histogram struct {
	Bounds []int64 `json:"bounds"`
	Counts []int64 `json:"counts"`
	Sum    int64   `json:"sum"`
	Count  int64   `json:"count"`
}

// MetricsOf is m's record.
func MetricsOf(m model.Metrics) Metrics {
	depth := map[string]int64{}
	for s, n := range m.Depth {
		depth[string(s)] = n
	}
	h := func(x model.Histogram) Histogram {
		return Histogram{Bounds: model.HistogramBounds, Counts: x.Counts, Sum: x.SumMs, Count: x.Count}
	}
	return Metrics{Depth: depth, OldestQueuedMs: m.OldestQueuedAge.Milliseconds(), Submitted: m.Submitted,
		Completions: m.Completions, Failures: m.Failures, Cancellations: m.Cancellations, Retries: m.Retries,
		LeaseExpiries: m.LeaseExpiries, StaleWrites: m.StaleWrites, BudgetExhausted: m.BudgetExhausted,
		Reviews: m.Reviews, Pruned: m.Pruned, QueueWait: h(m.QueueWait), RunTime: h(m.RunTime)}
}

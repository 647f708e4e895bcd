package wire

import (
	"slices"

	"github.com/leasehold/leasehold/model"
)

// KindOther is the kind under which Metrics.ByKind (and /metrics' kind
// label) counts the tasks of every kind a server does not name, and the
// counts whose task's kind is not known (model.KindUnknown): the kinds
// named are bounded whatever kinds callers submit.
const KindOther = "other"

// Counts are the outcome counters of one kind of task.
type Counts struct {
	Submitted       int64 `json:"submitted"`
	Completions     int64 `json:"completions"`
	Failures        int64 `json:"failures"`
	Cancellations   int64 `json:"cancellations"`
	Retries         int64 `json:"retries"`
	LeaseExpiries   int64 `json:"lease_expiries"`
	StaleWrites     int64 `json:"stale_writes"`
	BudgetExhausted int64 `json:"budget_exhaustions"`
	Reviews         int64 `json:"reviews"`
	Pruned          int64 `json:"pruned"`
}

// CountsOf is c's record.
func CountsOf(c model.Counts) Counts {
	return Counts{Submitted: c.Submitted, Completions: c.Completions, Failures: c.Failures,
		Cancellations: c.Cancellations, Retries: c.Retries, LeaseExpiries: c.LeaseExpiries,
		StaleWrites: c.StaleWrites, BudgetExhausted: c.BudgetExhausted, Reviews: c.Reviews, Pruned: c.Pruned}
}

// Metrics is the queue's metrics snapshot (GET /v1/metrics, metrics
// --json): the depth by state, the age of the oldest due queued task, the
// outcome counters over every kind and by kind, and the queue-wait and
// run-time distributions.
type Metrics struct {
	Depth          map[string]int64 `json:"depth"`
	OldestQueuedMs int64            `json:"oldest_queued_age_ms"`
	// The outcome counters, over every kind: each is the sum of its
	// counts in ByKind.
	Submitted       int64 `json:"submitted"`
	Completions     int64 `json:"completions"`
	Failures        int64 `json:"failures"`
	Cancellations   int64 `json:"cancellations"`
	Retries         int64 `json:"retries"`
	LeaseExpiries   int64 `json:"lease_expiries"`
	StaleWrites     int64 `json:"stale_writes"`
	BudgetExhausted int64 `json:"budget_exhaustions"`
	Reviews         int64 `json:"reviews"`
	Pruned          int64 `json:"pruned"`
	// ByKind holds the outcome counters by the kind of their task: each
	// kind the server names (zeros included), and KindOther for every
	// other kind and the counts of no known kind.
	ByKind    map[string]Counts `json:"by_kind"`
	QueueWait Histogram         `json:"queue_wait_ms"`
	RunTime   Histogram         `json:"run_time_ms"`
}

// Histogram is a model.Histogram on the wire: the bucket bounds (ms),
// the counts per bucket (one more than the bounds), the sum and count.
type Histogram struct {
	Bounds []int64 `json:"bounds"`
	Counts []int64 `json:"counts"`
	Sum    int64   `json:"sum"`
	Count  int64   `json:"count"`
}

// MetricsOf is m's record, its counts by kind folded by FoldKinds over
// kinds.
func MetricsOf(m model.Metrics, kinds []string) Metrics {
	depth := map[string]int64{}
	for _, s := range model.States() {
		depth[string(s)] = m.Depth[s]
	}
	h := func(x model.Histogram) Histogram {
		counts := x.Counts
		if counts == nil {
			counts = make([]int64, len(model.HistogramBounds)+1)
		}
		return Histogram{Bounds: model.HistogramBounds, Counts: counts, Sum: x.SumMs, Count: x.Count}
	}
	byKind := map[string]Counts{}
	for kind, c := range FoldKinds(m.ByKind, kinds) {
		byKind[kind] = CountsOf(c)
	}
	t := m.Totals()
	return Metrics{Depth: depth, OldestQueuedMs: m.OldestQueuedAge.Milliseconds(), Submitted: t.Submitted,
		Completions: t.Completions, Failures: t.Failures, Cancellations: t.Cancellations, Retries: t.Retries,
		LeaseExpiries: t.LeaseExpiries, StaleWrites: t.StaleWrites, BudgetExhausted: t.BudgetExhausted,
		Reviews: t.Reviews, Pruned: t.Pruned, ByKind: byKind, QueueWait: h(m.QueueWait), RunTime: h(m.RunTime)}
}

// MetricKinds is the sorted, deduplicated list of kinds, without
// KindOther (whose tasks are counted under KindOther anyway): the kinds a
// server names in its counts by kind.
func MetricKinds(kinds []string) []string {
	out := slices.DeleteFunc(slices.Clone(kinds), func(k string) bool { return k == KindOther })
	slices.Sort(out)
	return slices.Compact(out)
}

// FoldKinds folds counts by kind into the kinds a server names: each of
// kinds by name, present even when its counts are zero, and every other
// kind's counts (model.KindUnknown's too) summed under KindOther, which
// is always present. A sum over the result is the sum over byKind.
func FoldKinds(byKind map[string]model.Counts, kinds []string) map[string]model.Counts {
	kinds = MetricKinds(kinds)
	out := make(map[string]model.Counts, len(kinds)+1)
	for _, kind := range kinds {
		out[kind] = model.Counts{}
	}
	out[KindOther] = model.Counts{}
	for kind, c := range byKind {
		label := kind
		if !slices.Contains(kinds, kind) {
			label = KindOther
		}
		sum := out[label]
		sum.Add(c)
		out[label] = sum
	}
	return out
}

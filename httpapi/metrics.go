package httpapi

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/wire"
)

// queueCollector exposes the queue's metrics snapshot to Prometheus on
// every scrape: depth by state, the oldest queued task's age, the outcome
// counters, and the queue-wait and run-time distributions as histograms.
// The figures are read from the database, so every process reports the
// same ones.
type queueCollector struct {
	q   *queue.Queue
	log *slog.Logger
	// kinds are the kinds the depth by kind names, sorted; every other
	// kind's tasks count as kindOther, so the label's values are bounded.
	kinds []string
	// timeout bounds one scrape's read; zero means scrapeTimeout.
	timeout time.Duration
}

// scrapeTimeout is how long a scrape waits for the queue's metrics before
// it reports leasehold_metrics_up 0. The read is a read-only transaction,
// so cancelling it at the deadline loses nothing.
const scrapeTimeout = 5 * time.Second

var (
	descDepth  = prometheus.NewDesc("leasehold_tasks", "Tasks by state.", []string{"state"}, nil)
	descOldest = prometheus.NewDesc("leasehold_oldest_queued_age_seconds",
		"Age of the oldest queued task that is due.", nil, nil)
	descTotals = map[string]*prometheus.Desc{}
	descWait   = prometheus.NewDesc("leasehold_queue_wait_seconds",
		"Time from a task becoming eligible (queued and due) to its claim.", nil, nil)
	descRun = prometheus.NewDesc("leasehold_run_seconds",
		"Time from a claim to its end (settled, paused, released or expired).", nil, nil)
	descUp   = prometheus.NewDesc("leasehold_metrics_up", "1 if the queue's metrics could be read.", nil, nil)
	descKind = prometheus.NewDesc("leasehold_queued_tasks_by_kind",
		"Queued tasks by kind: the server's kinds by name, every other kind as other.", []string{"kind"}, nil)
)

// kindOther is the kind label of the tasks of a kind the server does not
// name.
const kindOther = wire.KindOther

// totals are the outcome counters, in a fixed order. Each is labelled by
// kind: the server's kinds by name, every other kind (and a count whose
// task's kind is not known) as other, so that the label's values are
// bounded and a sum over kind is the queue's total.
var totals = []struct {
	name, help string
	get        func(model.Counts) int64
}{
	{"leasehold_submitted_total", "Tasks submitted (the known population).", func(c model.Counts) int64 { return c.Submitted }},
	{"leasehold_completions_total", "Tasks that completed.", func(c model.Counts) int64 { return c.Completions }},
	{"leasehold_failures_total", "Tasks that failed.", func(c model.Counts) int64 { return c.Failures }},
	{"leasehold_cancellations_total", "Tasks cancelled.", func(c model.Counts) int64 { return c.Cancellations }},
	{"leasehold_retries_total", "Charged attempts requeued with backoff.", func(c model.Counts) int64 { return c.Retries }},
	{"leasehold_lease_expiries_total", "Claims whose lease expired.", func(c model.Counts) int64 { return c.LeaseExpiries }},
	{"leasehold_stale_writes_total", "Worker writes refused under a stale claim.", func(c model.Counts) int64 { return c.StaleWrites }},
	{"leasehold_budget_exhaustions_total", "Tasks failed for their budget.", func(c model.Counts) int64 { return c.BudgetExhausted }},
	{"leasehold_reviews_total", "Tasks parked in needs_review.", func(c model.Counts) int64 { return c.Reviews }},
	{"leasehold_pruned_total", "Terminal tasks removed by retention (prune); with the depths they account for every task submitted.", func(c model.Counts) int64 { return c.Pruned }},
}

func init() {
	for _, t := range totals {
		descTotals[t.name] = prometheus.NewDesc(t.name, t.help+" By the task's kind: the server's kinds by name, every other kind as other.",
			[]string{"kind"}, nil)
	}
}

// Describe sends every descriptor.
func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descDepth
	ch <- descOldest
	for _, t := range totals {
		ch <- descTotals[t.name]
	}
	ch <- descWait
	ch <- descRun
	ch <- descUp
	ch <- descKind
}

// Collect reads the snapshot and sends it.
func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	timeout := c.timeout
	if timeout <= 0 {
		timeout = scrapeTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	m, err := c.q.Metrics(ctx)
	if err != nil {
		c.log.Warn("metrics unreadable", "error", oneLine(err.Error()))
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 1)
	for _, s := range model.States() {
		ch <- prometheus.MustNewConstMetric(descDepth, prometheus.GaugeValue, float64(m.Depth[s]), string(s))
	}
	ch <- prometheus.MustNewConstMetric(descOldest, prometheus.GaugeValue, m.OldestQueuedAge.Seconds())
	byLabel := wire.FoldKinds(m.ByKind, c.kinds)
	for _, t := range totals {
		for _, kind := range c.kinds {
			ch <- prometheus.MustNewConstMetric(descTotals[t.name], prometheus.CounterValue, float64(t.get(byLabel[kind])), kind)
		}
		ch <- prometheus.MustNewConstMetric(descTotals[t.name], prometheus.CounterValue, float64(t.get(byLabel[kindOther])), kindOther)
	}
	ch <- histogram(descWait, m.QueueWait)
	ch <- histogram(descRun, m.RunTime)
	byKind, err := c.q.QueuedByKind(ctx)
	if err != nil {
		c.log.Warn("metrics by kind unreadable", "error", oneLine(err.Error()))
		return
	}
	other := int64(0)
	for kind, n := range byKind {
		if !slices.Contains(c.kinds, kind) {
			other += n
		}
	}
	for _, kind := range c.kinds {
		ch <- prometheus.MustNewConstMetric(descKind, prometheus.GaugeValue, float64(byKind[kind]), kind)
	}
	ch <- prometheus.MustNewConstMetric(descKind, prometheus.GaugeValue, float64(other), kindOther)
}

// histogram converts a fixed-bucket millisecond histogram to Prometheus's
// cumulative buckets in seconds.
func histogram(desc *prometheus.Desc, h model.Histogram) prometheus.Metric {
	buckets := map[float64]uint64{}
	var cumulative uint64
	for i, bound := range model.HistogramBounds {
		cumulative += uint64(h.Counts[i])
		buckets[float64(bound)/1000] = cumulative
	}
	return prometheus.MustNewConstHistogram(desc, uint64(h.Count), float64(h.SumMs)/1000, buckets)
}

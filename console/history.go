package console

import (
	"context"
	"fmt"
	"html/template"
	"sync"
	"time"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/reports"
)

// The Live page's history: the queue's metrics sampled on the console's
// clock, kept in memory for the last historyWindow.
const (
	// DefaultSampleEvery is how often the console samples the queue's
	// metrics when Options leaves SampleEvery zero.
	DefaultSampleEvery = time.Minute
	// historyWindow is how far back the Live page's charts reach.
	historyWindow = time.Hour
	// samplesMax bounds the samples kept, whatever SampleEvery is: an
	// hour of one a second.
	samplesMax = 3600 + 1
)

// historyStates are the states whose depth the Live page charts: the
// tasks still to be done or decided (the terminal ones only grow).
var historyStates = []model.State{model.Queued, model.Running, model.WaitingForApproval, model.NeedsReview}

// sample is the queue's metrics at one instant: the depth of each charted
// state and the running totals that throughput is the difference of
// (failures counts the moves to failed and to needs_review).
type sample struct {
	at                    time.Time
	depth                 [4]int64 // by historyStates
	completions, failures int64
}

// history is a bounded ring of samples, the oldest first.
type history struct {
	mu      sync.Mutex
	max     int
	samples []sample
	// waiting is signalled each time the sampling has taken a sample (or
	// failed to) and set its timer for the next: a test then moves the
	// clock on.
	waiting chan struct{}
}

func newHistory(max int) *history {
	return &history{max: max, waiting: make(chan struct{}, 1)}
}

// add keeps a sample of m taken at at, dropping the oldest past max.
func (h *history) add(at time.Time, m model.Metrics) {
	s := sample{at: at, completions: m.Completions, failures: m.Failures + m.Reviews}
	for i, st := range historyStates {
		s.depth[i] = m.Depth[st]
	}
	h.mu.Lock()
	if len(h.samples) == h.max {
		h.samples = append(h.samples[:0], h.samples[1:]...)
	}
	h.samples = append(h.samples, s)
	h.mu.Unlock()
}

// since returns a copy of the samples taken at or after from.
func (h *history) since(from time.Time) []sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []sample
	for _, s := range h.samples {
		if !s.at.Before(from) {
			out = append(out, s)
		}
	}
	return out
}

// sampleLoop samples the queue's metrics at once and then every
// c.sampleEvery on the console's clock until ctx ends. A failed read is
// logged and skipped: the chart shows the gap.
func (c *Console) sampleLoop(ctx context.Context) {
	for {
		m, err := c.backend.QueueMetrics(ctx)
		switch {
		case err == nil:
			c.history.add(c.clock.Now(), m)
		case ctx.Err() == nil:
			c.log.Warn("console: cannot sample the queue's metrics", "error", oneLine(err.Error()))
		}
		timer := c.clock.NewTimer(c.sampleEvery)
		select {
		case c.history.waiting <- struct{}{}:
		default:
		}
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.Chan():
		}
	}
}

// historyCharts draws the last historyWindow at now: the depth of each
// charted state, and the tasks completed and failed a minute between
// samples (the rise of the totals, per minute of the gap).
func historyCharts(samples []sample, now time.Time) ([]template.HTML, error) {
	from := now.Add(-historyWindow)
	x := func(at time.Time) int64 { return at.Sub(from).Milliseconds() }
	axis := reports.ChartAxis{From: 0, To: historyWindow.Milliseconds(), StartLabel: from.UTC().Format("15:04"),
		EndLabel: now.UTC().Format("15:04 UTC"), Title: "the last hour, as the server sampled it"}
	depth := reports.Chart{Title: "Queue depth by state", Unit: "tasks", Axis: axis}
	for i, st := range historyStates {
		s := reports.Series{Name: string(st), Unit: "tasks", Points: []reports.Point{}}
		for _, smp := range samples {
			s.Points = append(s.Points, reports.Point{X: x(smp.at), Y: float64(smp.depth[i])})
		}
		depth.Series = append(depth.Series, s)
	}
	done := reports.Series{Name: "completed", Unit: "tasks/min", Points: []reports.Point{}}
	failed := reports.Series{Name: "failed or to review", Unit: "tasks/min", Points: []reports.Point{}}
	for i := 1; i < len(samples); i++ {
		prev, cur := samples[i-1], samples[i]
		gap := cur.at.Sub(prev.at)
		if gap <= 0 {
			continue
		}
		perMinute := func(n int64) float64 { return float64(n) * float64(time.Minute) / float64(gap) }
		done.Points = append(done.Points, reports.Point{X: x(cur.at), Y: perMinute(cur.completions - prev.completions)})
		failed.Points = append(failed.Points, reports.Point{X: x(cur.at), Y: perMinute(cur.failures - prev.failures)})
	}
	throughput := reports.Chart{Title: "Throughput", Unit: "tasks a minute", Axis: axis, Series: []reports.Series{done, failed}}
	var out []template.HTML
	for _, ch := range []struct {
		id    string
		chart reports.Chart
	}{{"depth-chart", depth}, {"throughput-chart", throughput}} {
		fig, err := reports.ChartFigure(ch.id, ch.chart)
		if err != nil {
			return nil, fmt.Errorf("console: draw %s: %w", ch.id, err)
		}
		out = append(out, fig)
	}
	return out, nil
}

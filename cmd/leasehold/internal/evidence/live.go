package evidence

import (
	"fmt"
	"strings"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/liverun"
	"github.com/leasehold/leasehold/cmd/leasehold/internal/view"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/reports"
	"github.com/leasehold/leasehold/wire"
)

// FillLive fills the report's live section from the demo's result.
func FillLive(r *reports.Report, d liverun.Result) {
	r.Live.About = []string{
		fmt.Sprintf("Live: the %s scenario and the live fault stories over two real worker processes (leasehold worker), one file database, the wall clock, leases of %s; run %s, %.1f s, commit %s.",
			dash(d.Scenario), d.Settings["lease"], wire.TimeOf(d.Started), float64(d.DurationMs)/1000, dash(d.Commit)),
		fmt.Sprintf("Machine: %s, %s/%s, %s CPUs, %s.", d.Machine["hostname"], d.Machine["goos"], d.Machine["goarch"], d.Machine["cpus"], d.Machine["go"]),
		"Outcomes were observed from outside the workers' memory: task states, audit events and submissions through the queue's Go API on the same database file, effects from the external service's ledger, and storage back-off and local lease expiry from the worker logs' JSON records. Reproduce: make demo.",
	}
	for _, o := range d.Outcomes {
		r.Live.Outcomes = append(r.Live.Outcomes, reports.Outcome{Name: o.Name, Expected: o.Expected, Observed: o.Observed, Pass: o.Pass, AtMs: o.AtMs})
	}
	r.Live.Series = demoSeries(d)
	r.Live.Timelines = append(r.Live.Timelines, LiveTimeline(d))
}

// demoSeries turns the demo's metrics samples into chart series.
func demoSeries(d liverun.Result) []reports.Series {
	series := map[string]*reports.Series{}
	var order []string
	add := func(name, unit string, x int64, y float64) {
		s, ok := series[name]
		if !ok {
			s = &reports.Series{Name: name, Unit: unit}
			if strings.HasPrefix(name, "depth ") {
				s.Chart = "queue depth by state"
			}
			series[name] = s
			order = append(order, name)
		}
		s.Points = append(s.Points, reports.Point{X: x, Y: y})
	}
	for _, smp := range d.Samples {
		m := view.MetricsOf(smp.Metrics, []string{model.KindSynthetic})
		for _, st := range model.States() {
			add("depth "+string(st), "tasks", smp.AtMs, float64(m.Depth[string(st)]))
		}
		add("oldest due queued task", "s", smp.AtMs, float64(m.OldestQueuedMs)/1000)
		add("completions", "tasks", smp.AtMs, float64(m.Completions))
		add("failures", "tasks", smp.AtMs, float64(m.Failures))
		add("retries", "attempts", smp.AtMs, float64(m.Retries))
		add("budget exhaustions", "tasks", smp.AtMs, float64(m.BudgetExhausted))
		add("queue wait (mean)", "ms", smp.AtMs, mean(m.QueueWait))
		add("run time (mean)", "ms", smp.AtMs, mean(m.RunTime))
	}
	out := make([]reports.Series, 0, len(order))
	for _, name := range order {
		out = append(out, *series[name])
	}
	return out
}

// mean is a histogram's mean, 0 when it is empty.
func mean(h view.Histogram) float64 {
	if h.Count == 0 {
		return 0
	}
	return float64(h.Sum) / float64(h.Count)
}

// liveResult is the live outcome of story (of the scenario task named,
// when task is not empty) as a check's result.
func liveResult(d liverun.Result, story liverun.Story, task, inputs string) reports.Result {
	o, ok := d.Find(story, task)
	if !ok {
		return reports.Result{Kind: reports.Live, Inputs: inputs, Observed: fmt.Sprintf("not observed: the demo has no outcome %s %s", story, task), Command: "make demo"}
	}
	return reports.Result{Kind: reports.Live, Inputs: inputs, Observed: o.Observed, Pass: o.Pass, Command: "make demo"}
}

// dash is s, or "-" when s is empty.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

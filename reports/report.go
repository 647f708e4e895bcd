// Package reports renders leasehold's evidence: JSON, Markdown, and one
// self-contained HTML page with SVG charts and timelines. Every result is
// labelled fixture (simulated: fake clock, seeds given) or live (real
// processes, wall clock, machine given), and the two are kept apart:
// fixture and live figures never share a number, a table row or a chart.
// Validate refuses a report that mixes them.
package reports

import (
	"errors"
	"fmt"
)

// Kind labels where a figure comes from.
type Kind string

const (
	// Fixture results are simulated: the real queue under a fake clock,
	// driven by a seeded schedule, reproducible from the seed.
	Fixture Kind = "fixture"
	// Live results are measured on real processes with the wall clock.
	Live Kind = "live"
)

// Report is the whole evidence document.
type Report struct {
	Title     string    `json:"title"`
	Generated string    `json:"generated"` // RFC 3339, when the report was written
	Pass      bool      `json:"pass"`
	Versions  Versions  `json:"versions"`
	Pragmas   []string  `json:"pragmas"`
	Checks    []Check   `json:"checks"`
	Fixture   Section   `json:"fixture"`
	Live      Section   `json:"live"`
	Failed    *Attempt  `json:"failed_attempt,omitempty"`
	Commands  []Command `json:"commands"`
}

// Versions pins what produced the evidence.
type Versions struct {
	Module string `json:"module"`
	Commit string `json:"commit"`
	Go     string `json:"go"`
	SQLite string `json:"sqlite"`
	Schema int    `json:"schema_version"`
}

// Command is an exact command that reproduces some of the figures.
type Command struct {
	What    string `json:"what"`
	Command string `json:"command"`
}

// Check is one acceptance check of the assignment, with its results.
type Check struct {
	ID      string   `json:"id"`
	Title   string   `json:"title"`
	Results []Result `json:"results"`
}

// Pass reports whether the check has results and all of them passed.
func (c Check) Pass() bool {
	if len(c.Results) == 0 {
		return false
	}
	for _, r := range c.Results {
		if !r.Pass {
			return false
		}
	}
	return true
}

// Result is one observation for a check: its kind, the inputs used, what
// was observed, whether it passed, and the command that reproduces it.
type Result struct {
	Kind     Kind   `json:"kind"`
	Inputs   string `json:"inputs"`
	Observed string `json:"observed"`
	Pass     bool   `json:"pass"`
	Command  string `json:"command,omitempty"`
}

// Section holds the figures of one kind.
type Section struct {
	Kind Kind `json:"kind"`
	// About describes where the figures come from: the simulator's
	// scenarios and fault settings, or the live run's machine and times.
	About     []string   `json:"about"`
	Sweeps    []Sweep    `json:"sweeps,omitempty"`
	Outcomes  []Outcome  `json:"outcomes,omitempty"`
	Series    []Series   `json:"series,omitempty"`
	Timelines []Timeline `json:"timelines,omitempty"`
}

// Sweep is a scenario run over a range of seeds (fixture only).
type Sweep struct {
	Scenario     string        `json:"scenario"`
	From         uint64        `json:"from"`
	Seeds        int           `json:"seeds"`
	Passed       int           `json:"passed"`
	Failed       int           `json:"failed"`
	Faults       string        `json:"faults"`
	Fingerprints []Fingerprint `json:"fingerprints"`
	Command      string        `json:"command"`
	// Coverage is the sweep's coverage map: the cells (transitions,
	// refusal classes, fault kinds at phases) with the seeds that reached
	// each, the scenario's declared cells marked.
	Coverage []CoverageCell `json:"coverage,omitempty"`
}

// CoverageCell is one cell of a sweep's coverage map.
type CoverageCell struct {
	Cell     string `json:"cell"`
	Seeds    int    `json:"seeds"`
	Declared bool   `json:"declared"`
}

// Fingerprint is a seed's trace fingerprint.
type Fingerprint struct {
	Seed        uint64 `json:"seed"`
	Fingerprint string `json:"fingerprint"`
}

// Outcome is one expected outcome of the live demo and what was observed.
type Outcome struct {
	Name     string `json:"name"`
	Expected string `json:"expected"`
	Observed string `json:"observed"`
	Pass     bool   `json:"pass"`
	AtMs     int64  `json:"at_ms"`
}

// Series is one line of a small chart: a figure sampled over time.
type Series struct {
	Name string `json:"name"`
	Unit string `json:"unit"`
	// Chart groups series drawn as several lines of one chart (queue depth
	// by state, say); series with the same Chart share it, in the order
	// they appear. Empty draws the series in a chart of its own, titled
	// with its Name.
	Chart  string  `json:"chart,omitempty"`
	Points []Point `json:"points"`
}

// Point is one sample: X in milliseconds since the start, Y the value.
type Point struct {
	X int64   `json:"x"`
	Y float64 `json:"y"`
}

// Timeline is one run drawn over time: a lane per worker, claims as bars
// marked with their fence, marks for heartbeats, lease expiries, refused
// writes, effects and state changes, faults shaded, and the violation (if
// any) highlighted.
type Timeline struct {
	Title     string   `json:"title"`
	Kind      Kind     `json:"kind"`
	Unit      string   `json:"unit"` // "simulated ms" or "wall ms"
	Start     int64    `json:"start"`
	End       int64    `json:"end"`
	Lanes     []string `json:"lanes"`
	Bars      []Bar    `json:"bars"`
	Marks     []Mark   `json:"marks"`
	Shades    []Shade  `json:"shades"`
	Violation *Mark    `json:"violation,omitempty"`
	Caption   string   `json:"caption"`
}

// Bar is one claim held by a worker.
type Bar struct {
	Lane    string `json:"lane"`
	Start   int64  `json:"start"`
	End     int64  `json:"end"`
	TaskID  string `json:"task_id"`
	Attempt int    `json:"attempt"`
	Fence   int64  `json:"fence"`
	Label   string `json:"label"`  // short, drawn on the bar
	Detail  string `json:"detail"` // hover text
}

// Mark kinds.
const (
	MarkHeartbeat = "heartbeat"
	MarkExpiry    = "lease_expired"
	MarkStale     = "stale_write"
	MarkEffect    = "effect"
	MarkState     = "state"
	MarkViolation = "violation"
	MarkFault     = "fault"
)

// Mark is an instant on a lane ("" for the queue itself).
type Mark struct {
	Lane   string `json:"lane"`
	At     int64  `json:"at"`
	Kind   string `json:"kind"`
	Label  string `json:"label"`
	Detail string `json:"detail"` // hover text: task, attempt, fence, operation IDs
	// TaskID, where the mark belongs to one task, draws it on that task's
	// claim when its lane holds several claims at once.
	TaskID string `json:"task_id,omitempty"`
}

// Shade is a stretch of time under a fault.
type Shade struct {
	Start int64  `json:"start"`
	End   int64  `json:"end"`
	Label string `json:"label"`
	// Lane confines the shade to one lane (a stalled worker, say); empty
	// shades every lane (storage down).
	Lane string `json:"lane,omitempty"`
}

// Attempt is the failed attempt: a real failure, how it was found and the
// change made after investigating it (fixture).
type Attempt struct {
	Title     string   `json:"title"`
	Story     []string `json:"story"`
	Variant   string   `json:"variant"`
	Scenario  string   `json:"scenario"`
	Seed      uint64   `json:"seed"`
	SeedsRun  int      `json:"seeds_run"`
	Invariant string   `json:"invariant"`
	Detail    string   `json:"detail"`
	Shrunk    []string `json:"shrunk"`
	// Trace is the shrunk run's trace: what happened, event by event.
	Trace     []string  `json:"trace,omitempty"`
	Replay    string    `json:"replay"`
	FixedRun  string    `json:"fixed_run"`
	FixedPass bool      `json:"fixed_pass"`
	Timeline  *Timeline `json:"timeline,omitempty"`
}

// ErrMixed is returned by Validate when a fixture figure sits in a live
// place or the other way round.
var ErrMixed = errors.New("fixture and live figures mixed")

// Validate checks that the report keeps fixture and live apart: each
// section holds only its own kind (including its timelines), every check
// result is labelled with one kind, and the failed attempt is fixture. It
// also refuses a timeline whose marks, bars or violation fall outside its
// range.
func (r Report) Validate() error {
	if r.Fixture.Kind != Fixture {
		return fmt.Errorf("the fixture section is labelled %q: %w", r.Fixture.Kind, ErrMixed)
	}
	if r.Live.Kind != Live {
		return fmt.Errorf("the live section is labelled %q: %w", r.Live.Kind, ErrMixed)
	}
	if len(r.Live.Sweeps) > 0 {
		return fmt.Errorf("the live section holds simulator sweeps: %w", ErrMixed)
	}
	if len(r.Fixture.Outcomes) > 0 || len(r.Fixture.Series) > 0 {
		return fmt.Errorf("the fixture section holds live outcomes or samples: %w", ErrMixed)
	}
	for _, s := range []Section{r.Fixture, r.Live} {
		for _, t := range s.Timelines {
			if t.Kind != s.Kind {
				return fmt.Errorf("timeline %q is %s in the %s section: %w", t.Title, t.Kind, s.Kind, ErrMixed)
			}
			if err := t.validate(); err != nil {
				return err
			}
		}
	}
	for _, c := range r.Checks {
		for _, res := range c.Results {
			if res.Kind != Fixture && res.Kind != Live {
				return fmt.Errorf("check %s has a result labelled %q: %w", c.ID, res.Kind, ErrMixed)
			}
		}
	}
	if r.Failed != nil && r.Failed.Timeline != nil {
		if r.Failed.Timeline.Kind != Fixture {
			return fmt.Errorf("the failed attempt's timeline is %s: %w", r.Failed.Timeline.Kind, ErrMixed)
		}
		if err := r.Failed.Timeline.validate(); err != nil {
			return err
		}
	}
	return nil
}

func (t Timeline) validate() error {
	if t.End < t.Start {
		return fmt.Errorf("timeline %q ends before it starts", t.Title)
	}
	in := func(at int64) bool { return at >= t.Start && at <= t.End }
	for _, b := range t.Bars {
		if !in(b.Start) || !in(b.End) || b.End < b.Start {
			return fmt.Errorf("timeline %q: bar %s outside %d..%d", t.Title, b.Label, t.Start, t.End)
		}
	}
	for _, m := range t.Marks {
		if !in(m.At) {
			return fmt.Errorf("timeline %q: mark %s at %d outside %d..%d", t.Title, m.Label, m.At, t.Start, t.End)
		}
	}
	if v := t.Violation; v != nil && !in(v.At) {
		return fmt.Errorf("timeline %q: violation %s at %d outside %d..%d", t.Title, v.Label, v.At, t.Start, t.End)
	}
	return nil
}

package reports

import (
	"strconv"
	"strings"
)

// tally counts passes and failures.
type tally struct {
	Pass int
	Fail int
}

// Total is how many were counted.
func (t tally) Total() int { return t.Pass + t.Fail }

func (t *tally) add(pass bool) {
	if pass {
		t.Pass++
	} else {
		t.Fail++
	}
}

// summary is what the report's header says: the verdict and its counts.
type summary struct {
	Pass    bool
	Checks  tally
	Fixture tally // check results labelled fixture
	Live    tally // check results labelled live
}

func summarize(r Report) summary {
	s := summary{Pass: r.Pass}
	for _, c := range r.Checks {
		s.Checks.add(c.Pass())
		for _, res := range c.Results {
			if res.Kind == Fixture {
				s.Fixture.add(res.Pass)
			} else {
				s.Live.add(res.Pass)
			}
		}
	}
	return s
}

// verdict spells a pass flag.
func verdict(pass bool) string {
	if pass {
		return "PASS"
	}
	return "FAIL"
}

// chartGroup is the series drawn in one chart.
type chartGroup struct {
	Title  string
	Unit   string
	Series []Series
	// axis, when set, fixes the x axis (ChartFigure's Chart); otherwise it
	// spans the points and reads as wall time since the start.
	axis *ChartAxis
}

// groupSeries gathers series into charts: series sharing a Chart name go
// together, in the order the first of them appears; a series without one
// gets a chart of its own.
func groupSeries(series []Series) []chartGroup {
	var groups []chartGroup
	index := make(map[string]int)
	for _, s := range series {
		if s.Chart != "" {
			if i, ok := index[s.Chart]; ok {
				groups[i].Series = append(groups[i].Series, s)
				continue
			}
			index[s.Chart] = len(groups)
			groups = append(groups, chartGroup{Title: s.Chart, Unit: s.Unit, Series: []Series{s}})
			continue
		}
		groups = append(groups, chartGroup{Title: s.Name, Unit: s.Unit, Series: []Series{s}})
	}
	return groups
}

// seriesStats are a series' minimum, maximum and last value.
type seriesStats struct {
	Min, Max, Last float64
	Samples        int
}

func statsOf(points []Point) seriesStats {
	st := seriesStats{Samples: len(points)}
	for i, p := range points {
		if i == 0 || p.Y < st.Min {
			st.Min = p.Y
		}
		if i == 0 || p.Y > st.Max {
			st.Max = p.Y
		}
		st.Last = p.Y
	}
	return st
}

// queueLane names the lane of marks that belong to the queue itself
// (Mark.Lane empty): the reaper, a caller, the storage.
const queueLane = "queue"

// lanesOf lists a timeline's lanes: its declared lanes in order, then any
// lane a bar, mark or shade names that was not declared, in order of
// appearance, then the queue's own lane if anything sits on it.
func lanesOf(t Timeline) []string {
	var lanes []string
	seen := make(map[string]bool)
	add := func(name string) {
		if !seen[name] {
			seen[name] = true
			lanes = append(lanes, name)
		}
	}
	for _, l := range t.Lanes {
		add(l)
	}
	queue := false
	for _, b := range t.Bars {
		if b.Lane == "" {
			queue = true
			continue
		}
		add(b.Lane)
	}
	marks := t.Marks
	if t.Violation != nil {
		marks = append(append([]Mark(nil), marks...), *t.Violation)
	}
	for _, m := range marks {
		if m.Lane == "" {
			queue = true
			continue
		}
		add(m.Lane)
	}
	for _, s := range t.Shades {
		if s.Lane != "" {
			add(s.Lane)
		}
	}
	if queue && !seen[queueLane] {
		lanes = append(lanes, queueLane)
	}
	return lanes
}

// laneName is the lane a mark or bar is drawn on.
func laneName(lane string) string {
	if lane == "" {
		return queueLane
	}
	return lane
}

// number formats a sample value: integers plainly, others with at most
// two decimals.
func number(y float64) string {
	if y == float64(int64(y)) {
		return strconv.FormatInt(int64(y), 10)
	}
	s := strconv.FormatFloat(y, 'f', 2, 64)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// seedRange spells the seeds a sweep covered.
func seedRange(s Sweep) string {
	if s.Seeds <= 1 {
		return strconv.FormatUint(s.From, 10)
	}
	return strconv.FormatUint(s.From, 10) + "–" + strconv.FormatUint(s.From+uint64(s.Seeds)-1, 10)
}

// shortHash cuts a fingerprint to its first 12 characters.
func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// barHover is a bar's hover text: task, attempt, fence, lane and times.
func barHover(t Timeline, b Bar) string {
	s := "claim " + b.TaskID + " attempt " + strconv.Itoa(b.Attempt) + " fence " + strconv.FormatInt(b.Fence, 10) +
		" on " + laneName(b.Lane) + ", " + strconv.FormatInt(b.Start, 10) + "–" + strconv.FormatInt(b.End, 10) + " " + t.Unit
	if b.Detail != "" {
		s += "\n" + b.Detail
	}
	return s
}

// markHover is a mark's hover text: kind, label, lane, time and detail.
func markHover(t Timeline, m Mark) string {
	s := m.Kind + ": " + m.Label + " on " + laneName(m.Lane) + " at " + strconv.FormatInt(m.At, 10) + " " + t.Unit
	if m.Detail != "" {
		s += "\n" + m.Detail
	}
	return s
}

// shadeHover is a fault shade's hover text.
func shadeHover(t Timeline, s Shade) string {
	where := "all lanes"
	if s.Lane != "" {
		where = s.Lane
	}
	return "fault: " + s.Label + " on " + where + ", " + strconv.FormatInt(s.Start, 10) + "–" + strconv.FormatInt(s.End, 10) + " " + t.Unit
}

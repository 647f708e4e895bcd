package reports

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// renderers are the three outputs, each of which must refuse an invalid
// report.
var renderers = []struct {
	name   string
	render func(io.Writer, Report) error
}{
	{"json", JSON},
	{"markdown", Markdown},
	{"html", HTML},
}

// stable zeroes the fields of a report that change from run to run
// (Generated, the wall-clock time it was written), so the rest can be
// compared with a golden file.
func stable(r Report) Report {
	r.Generated = ""
	return r
}

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "missing golden file: run go test ./reports -update")
	if !bytes.Equal(want, got) {
		t.Fatalf("%s differs (regenerate with go test ./reports -update and review the diff):\n%s", path, firstDifference(string(want), string(got)))
	}
}

// firstDifference shows where two texts part, line by line, with a few
// lines of context.
func firstDifference(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		if i < len(w) && i < len(g) && w[i] == g[i] {
			continue
		}
		line := func(lines []string, n int) string {
			if n < len(lines) {
				return lines[n]
			}
			return "<end of file>"
		}
		var b strings.Builder
		for n := max(0, i-2); n < i+3; n++ {
			fmt.Fprintf(&b, "line %d\n  want: %s\n  got:  %s\n", n+1, line(w, n), line(g, n))
		}
		return b.String()
	}
	return "(no line differs)"
}

func render(t *testing.T, fn func(io.Writer, Report) error, r Report) []byte {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, fn(&b, r))
	return b.Bytes()
}

func TestSampleIsValid(t *testing.T) {
	require.NoError(t, sampleReport().Validate())
}

func TestMarkdownGolden(t *testing.T) {
	golden(t, "evidence.golden.md", render(t, Markdown, stable(sampleReport())))
}

func TestJSONGolden(t *testing.T) {
	got := render(t, JSON, stable(sampleReport()))
	golden(t, "evidence.golden.json", got)

	// The JSON reads back into the same report.
	var back Report
	require.NoError(t, json.Unmarshal(got, &back))
	require.Equal(t, stable(sampleReport()), back)
}

func TestStableZeroesOnlyTheClock(t *testing.T) {
	r := sampleReport()
	require.NotEmpty(t, r.Generated)
	s := stable(r)
	require.Empty(t, s.Generated)
	s.Generated = r.Generated
	require.Equal(t, r, s)
}

func TestRenderingIsDeterministic(t *testing.T) {
	for _, rd := range renderers {
		t.Run(rd.name, func(t *testing.T) {
			r := sampleReport()
			require.Equal(t, string(render(t, rd.render, r)), string(render(t, rd.render, r)))
		})
	}
}

// TestMarkdownKeepsKindsApart checks that every result row of the checks
// table names exactly one kind.
func TestMarkdownKeepsKindsApart(t *testing.T) {
	md := string(render(t, Markdown, stable(sampleReport())))
	_, rest, ok := strings.Cut(md, "## Acceptance checks\n")
	require.True(t, ok)
	table, _, _ := strings.Cut(rest, "\n\n## ")
	rows := 0
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| A") {
			continue
		}
		rows++
		cells := strings.Split(line, " | ")
		require.Contains(t, []string{"fixture", "live"}, cells[2], line)
	}
	results := 0
	for _, c := range sampleReport().Checks {
		results += len(c.Results)
	}
	require.Equal(t, results, rows)
}

// TestMixedKindsRefused places a live figure where only fixture figures
// belong (and the other way round) and checks that Validate and every
// renderer refuse the report with ErrMixed, writing nothing.
func TestMixedKindsRefused(t *testing.T) {
	cases := []struct {
		name string
		mix  func(r *Report)
	}{
		{"live outcome in the fixture section", func(r *Report) {
			r.Fixture.Outcomes = append(r.Fixture.Outcomes, r.Live.Outcomes[0])
		}},
		{"live series in the fixture section", func(r *Report) {
			r.Fixture.Series = append(r.Fixture.Series, r.Live.Series[0])
		}},
		{"live timeline in the fixture section", func(r *Report) {
			r.Fixture.Timelines = append(r.Fixture.Timelines, r.Live.Timelines[0])
		}},
		{"fixture timeline in the live section", func(r *Report) {
			r.Live.Timelines = append(r.Live.Timelines, r.Fixture.Timelines[0])
		}},
		{"failed attempt's timeline labelled live", func(r *Report) {
			tl := *r.Failed.Timeline
			tl.Kind = Live
			r.Failed.Timeline = &tl
		}},
		{"simulator sweep in the live section", func(r *Report) {
			r.Live.Sweeps = append(r.Live.Sweeps, r.Fixture.Sweeps[0])
		}},
		{"fixture section labelled live", func(r *Report) {
			r.Fixture.Kind = Live
		}},
		{"live section labelled fixture", func(r *Report) {
			r.Live.Kind = Fixture
		}},
		{"check result without a kind", func(r *Report) {
			r.Checks[0].Results[0].Kind = ""
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := sampleReport()
			c.mix(&r)
			require.ErrorIs(t, r.Validate(), ErrMixed)
			for _, rd := range renderers {
				var b bytes.Buffer
				err := rd.render(&b, r)
				require.ErrorIs(t, err, ErrMixed, rd.name)
				require.Zero(t, b.Len(), "%s wrote %d bytes of a refused report", rd.name, b.Len())
			}
		})
	}
}

// TestOutOfRangeRefused checks that a timeline's figures must fall inside
// it.
func TestOutOfRangeRefused(t *testing.T) {
	cases := map[string]func(tl *Timeline){
		"bar after the end":       func(tl *Timeline) { tl.Bars[0].End = tl.End + 1 },
		"mark before the start":   func(tl *Timeline) { tl.Marks[0].At = tl.Start - 1 },
		"violation after the end": func(tl *Timeline) { tl.Violation.At = tl.End + 1 },
		"end before the start":    func(tl *Timeline) { tl.End = tl.Start - 1 },
	}
	for name, breakIt := range cases {
		t.Run(name, func(t *testing.T) {
			r := sampleReport()
			tl := *r.Failed.Timeline
			tl.Bars = append([]Bar(nil), tl.Bars...)
			tl.Marks = append([]Mark(nil), tl.Marks...)
			v := *tl.Violation
			tl.Violation = &v
			breakIt(&tl)
			r.Failed.Timeline = &tl
			require.Error(t, r.Validate())
			for _, rd := range renderers {
				require.Error(t, rd.render(io.Discard, r), rd.name)
			}
		})
	}
}

// TestHTMLSelfContained checks that the page needs nothing from outside:
// no URL, no script, no stylesheet link, no image source.
func TestHTMLSelfContained(t *testing.T) {
	page := strings.ToLower(string(render(t, HTML, sampleReport())))
	for _, banned := range []string{"http://", "https://", "<script", "<link", "src=", "url(", "@import", "<iframe", "<img"} {
		require.NotContains(t, page, banned)
	}
	require.Contains(t, page, "<style>")
	require.Contains(t, page, "<svg")
}

// TestHTMLHoldsTheReport checks the page's structure: the verdict, a row
// per check result labelled with its kind, the two sections, a chart per
// chart group, the timelines with their bars, marks and the violation,
// and hover text naming task, attempt and fence.
func TestHTMLHoldsTheReport(t *testing.T) {
	r := sampleReport()
	page := string(render(t, HTML, r))
	count := func(pattern string) int { return len(regexp.MustCompile(pattern).FindAllStringIndex(page, -1)) }

	require.Contains(t, page, `id="verdict" class="verdict fail"`)
	results, fixtureRows, liveRows := 0, 0, 0
	for _, c := range r.Checks {
		for _, res := range c.Results {
			results++
			if res.Kind == Fixture {
				fixtureRows++
			} else {
				liveRows++
			}
		}
	}
	require.Equal(t, results, count(`<tr class="check-row `))
	require.Equal(t, fixtureRows, count(`<tr class="check-row fixture"`))
	require.Equal(t, liveRows, count(`<tr class="check-row live"`))
	require.Equal(t, fixtureRows+liveRows, count(`<td><span class="kind (fixture|live)">(FIXTURE|LIVE)</span></td>`))

	require.Equal(t, 1, count(`<details id="fixture" class="fold kind-section fixture">`))
	require.Equal(t, 1, count(`<details id="live" class="fold kind-section live">`))
	require.Equal(t, len(groupSeries(r.Live.Series)), count(`<figure class="chart"`))
	require.Equal(t, 3, count(`<figure class="timeline `))

	bars, marks := 0, 0
	for _, tl := range append(append(r.Fixture.Timelines, r.Live.Timelines...), *r.Failed.Timeline) {
		bars += len(tl.Bars)
		marks += len(tl.Marks)
	}
	require.Equal(t, bars, count(`<g class="bar[ "]`))
	// Every mark, and the violation's own glyph.
	require.Equal(t, marks+1, count(`<g class="mark `))
	require.Equal(t, 1, count(`<g class="violation">`))
	require.Equal(t, 1, count(`<g class="bar violating"`), "the zombie's claim is outlined")
	require.Contains(t, page, "VIOLATION: single-valid-claim")
	require.Contains(t, page, "<title>claim t_7f3a attempt 1 fence 1 on w1")
	require.Contains(t, page, "t_1a2b f2</text>")

	// The queue wait and run time series have charts of their own; the
	// depth by state shares one chart with a legend.
	require.Contains(t, page, "<strong>Queue wait (submitted → claimed)</strong>")
	require.Contains(t, page, "<strong>Run time (claimed → settled)</strong>")
	require.Contains(t, page, "<strong>Queue depth by state</strong>")
}

// TestHTMLEscapes checks that text from the report cannot inject markup.
func TestHTMLEscapes(t *testing.T) {
	r := sampleReport()
	hostile := `<script>alert("x")</script><img src=x onerror=alert(1)>`
	r.Title = hostile
	r.Checks[0].Results[0].Observed = hostile
	r.Fixture.Timelines[0].Bars[0].Detail = hostile
	r.Fixture.Timelines[0].Marks[0].Label = hostile
	r.Live.Series[0].Name = hostile
	r.Failed.Shrunk = append(r.Failed.Shrunk, hostile)
	page := strings.ToLower(string(render(t, HTML, r)))
	require.NotContains(t, page, "<script")
	require.NotContains(t, page, "<img")
	require.Contains(t, page, "&lt;script&gt;")
}

// TestMarkdownEscapesTables checks that a pipe or a line break in a value
// cannot break a table row.
func TestMarkdownEscapesTables(t *testing.T) {
	r := sampleReport()
	r.Checks[0].Results[0].Observed = "a | b\nc"
	md := string(render(t, Markdown, r))
	require.Contains(t, md, `a \| b<br>c`)
}

func TestNiceTicks(t *testing.T) {
	require.Equal(t, []int64{0, 1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000}, niceTicks(0, 9000, 10))
	require.Equal(t, []int64{0, 2000, 4000, 6000, 8000, 10000, 12000}, niceTicks(0, 12000, 10))
	require.Equal(t, []int64{500, 1000, 1500}, niceTicks(250, 1700, 4))
	require.Equal(t, []int64{7}, niceTicks(7, 7, 10))
}

func TestLanesOf(t *testing.T) {
	tl := Timeline{
		Lanes: []string{"w2"},
		Bars:  []Bar{{Lane: "w1"}, {Lane: "w2"}},
		Marks: []Mark{{Lane: ""}, {Lane: "w3"}},
	}
	require.Equal(t, []string{"w2", "w1", "w3", queueLane}, lanesOf(tl))
}

func TestGroupSeries(t *testing.T) {
	groups := groupSeries([]Series{
		{Name: "queued", Chart: "depth"}, {Name: "wait"}, {Name: "running", Chart: "depth"}, {Name: "run"},
	})
	require.Len(t, groups, 3)
	require.Equal(t, "depth", groups[0].Title)
	require.Len(t, groups[0].Series, 2)
	require.Equal(t, "wait", groups[1].Title)
	require.Equal(t, "run", groups[2].Title)
}

// TestTimelineLayoutDense lays out a crowded timeline (overlapping claims
// on one worker, hundreds of marks) and checks that claims on one track
// never overlap, that no two drawn labels in one row overlap, and that
// every bar label fits its bar.
func TestTimelineLayoutDense(t *testing.T) {
	tl := Timeline{Title: "dense", Kind: Live, Unit: "wall ms", Start: 0, End: 30000, Lanes: []string{"w1", "w2"}}
	for i := range 40 {
		lane := []string{"w1", "w2"}[i%2]
		start := int64(i * 700)
		task := fmt.Sprintf("t_%04x", i)
		tl.Bars = append(tl.Bars, Bar{Lane: lane, Start: start, End: min(start+4000, 30000), TaskID: task, Attempt: 1, Fence: int64(i + 1)})
		for k := range 5 {
			tl.Marks = append(tl.Marks, Mark{Lane: lane, At: min(start+int64(k)*500, 30000), Kind: []string{MarkState, MarkHeartbeat, MarkEffect, MarkHeartbeat, MarkState}[k],
				Label: fmt.Sprintf("%s step %d", task, k), TaskID: task})
		}
	}
	tl.Marks = append(tl.Marks, Mark{Lane: "", At: 15000, Kind: MarkExpiry, Label: "lease expired"})
	tl.Shades = []Shade{{Start: 1000, End: 9000, Label: "storage busy"}, {Start: 2000, End: 4000, Label: "w1 stalled", Lane: "w1"}}
	require.NoError(t, tl.validate())
	v := layoutTimeline("timeline-test", tl)

	num := func(s string) float64 {
		x, err := strconv.ParseFloat(s, 64)
		require.NoError(t, err)
		return x
	}
	type box struct{ x0, x1 float64 }
	overlapping := func(rows map[string][]box) {
		t.Helper()
		for row, boxes := range rows {
			for i := range boxes {
				for j := i + 1; j < len(boxes); j++ {
					a, b := boxes[i], boxes[j]
					require.False(t, a.x0 < b.x1 && b.x0 < a.x1, "row %s: %v overlaps %v", row, a, b)
				}
			}
		}
	}
	bars := map[string][]box{}
	for _, b := range v.Bars {
		x0, w := num(b.X), num(b.W)
		bars[b.Y] = append(bars[b.Y], box{x0 + 0.5, x0 + w - 0.5})
		if b.Label != "" {
			lx := num(b.LabelX)
			require.GreaterOrEqual(t, lx, x0, b.Label)
			require.LessOrEqual(t, lx+textWidth(b.Label, smallFontSize), x0+w, b.Label)
		}
	}
	overlapping(bars)
	require.GreaterOrEqual(t, len(bars), 6, "overlapping claims stack on several tracks")

	labels := map[string][]box{}
	for _, m := range v.Marks {
		if m.ShowLabel {
			x0 := num(m.LabelX)
			labels[m.LabelY] = append(labels[m.LabelY], box{x0, x0 + textWidth(m.Label, smallFontSize)})
		}
	}
	for _, s := range v.Shades {
		if s.ShowLabel {
			x0 := num(s.LabelX)
			labels["shade "+s.LabelY] = append(labels["shade "+s.LabelY], box{x0, x0 + textWidth(s.Label, smallFontSize)})
		}
	}
	overlapping(labels)
	require.NotEmpty(t, labels)
}

// TestMinimalReportRenders checks that a nearly empty report, and one
// with degenerate figures (a series without samples, a timeline of zero
// length, a check without results), renders in every format.
func TestMinimalReportRenders(t *testing.T) {
	minimal := Report{Title: "empty", Fixture: Section{Kind: Fixture}, Live: Section{Kind: Live}}
	degenerate := minimal
	degenerate.Checks = []Check{{ID: "X1", Title: "no result yet"}}
	degenerate.Live.Series = []Series{{Name: "nothing", Unit: "tasks"}, {Name: "one", Unit: "ms", Points: []Point{{X: 5, Y: 3}}}}
	degenerate.Fixture.Timelines = []Timeline{{Title: "instant", Kind: Fixture, Unit: "simulated ms", Start: 10, End: 10,
		Bars:  []Bar{{Lane: "w1", Start: 10, End: 10, TaskID: "t_1", Fence: 1}},
		Marks: []Mark{{At: 10, Kind: "something new", Label: "?"}}}}
	for name, r := range map[string]Report{"minimal": minimal, "degenerate": degenerate} {
		for _, rd := range renderers {
			t.Run(name+"/"+rd.name, func(t *testing.T) {
				out := render(t, rd.render, r)
				require.NotEmpty(t, out)
			})
		}
	}
	md := string(render(t, Markdown, degenerate))
	require.Contains(t, md, "| X1 | no result yet | – | – | no result | FAIL | – |")
}

package reports

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// seriesRowsMax bounds the rows of one series table in the Markdown: a
// longer series is sampled evenly, its first and last samples kept.
const seriesRowsMax = 12

// Markdown writes the report as Markdown: the verdict and its counts, the
// versions and PRAGMAs, the acceptance checks (one row per result, each
// labelled fixture or live), the fixture section, the live section, the
// failed attempt and the commands. The same report always gives the same
// bytes. It refuses a report that Validate refuses, before writing
// anything.
func Markdown(w io.Writer, r Report) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("markdown report: %w", err)
	}
	var b strings.Builder
	md := mdWriter{&b}
	md.header(r)
	md.versions(r)
	md.checks(r)
	md.fixture(r.Fixture)
	md.live(r.Live)
	if r.Failed != nil {
		md.failed(*r.Failed)
	}
	md.commands(r.Commands)
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("markdown report: %w", err)
	}
	return nil
}

type mdWriter struct{ b *strings.Builder }

func (md mdWriter) line(format string, args ...any) {
	fmt.Fprintf(md.b, format, args...)
	md.b.WriteByte('\n')
}

func (md mdWriter) blank() { md.b.WriteByte('\n') }

// row writes one table row of already formatted cells.
func (md mdWriter) row(cells ...string) {
	md.b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
}

// table writes a header row and its separator.
func (md mdWriter) table(head ...string) {
	md.row(head...)
	sep := make([]string, len(head))
	for i := range sep {
		sep[i] = "---"
	}
	md.row(sep...)
}

// cell escapes text for a table cell: pipes escaped, line breaks as <br>.
func cell(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, "|", `\|`)
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\n", "<br>")
	if s == "" {
		return "–"
	}
	return s
}

// code spells text as inline code, with a fence of backticks longer than
// any run inside it. Pipes are escaped for tables.
func code(s string) string {
	if s == "" {
		return "–"
	}
	fence := strings.Repeat("`", longestRun(s, '`')+1)
	pad := ""
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		pad = " "
	}
	s = strings.ReplaceAll(s, "\n", " ")
	s = strings.ReplaceAll(s, "|", `\|`)
	return fence + pad + s + pad + fence
}

// block writes text as a fenced code block.
func (md mdWriter) block(lines ...string) {
	text := strings.Join(lines, "\n")
	fence := strings.Repeat("`", max(3, longestRun(text, '`')+1))
	md.line("%s", fence)
	if text != "" {
		md.line("%s", text)
	}
	md.line("%s", fence)
}

func longestRun(s string, c byte) int {
	longest, run := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	return longest
}

// text flattens a paragraph to one line.
func text(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func (md mdWriter) header(r Report) {
	s := summarize(r)
	md.line("# %s", text(r.Title))
	md.blank()
	md.line("**Verdict: %s** (generated %s)", verdict(r.Pass), orDash(r.Generated))
	md.blank()
	md.line("- Acceptance checks: %d, %d pass, %d fail", s.Checks.Total(), s.Checks.Pass, s.Checks.Fail)
	md.line("- Fixture results (simulated): %d, %d pass, %d fail", s.Fixture.Total(), s.Fixture.Pass, s.Fixture.Fail)
	md.line("- Live results (real processes): %d, %d pass, %d fail", s.Live.Total(), s.Live.Pass, s.Live.Fail)
	if r.Failed != nil {
		md.line("- Failed attempt: %s (seed %d, invariant %s; fixed run %s)",
			text(r.Failed.Title), r.Failed.Seed, orDash(r.Failed.Invariant), verdict(r.Failed.FixedPass))
	}
	md.blank()
	md.line("Fixture results come from the simulator (the real queue under a fake clock, seeds given); " +
		"live results come from real processes on the wall clock. The two never share a number, a table row or a chart.")
	md.blank()
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

func (md mdWriter) versions(r Report) {
	v := r.Versions
	md.line("## Versions")
	md.blank()
	md.table("Module", "Commit", "Go", "SQLite", "Schema")
	md.row(cell(v.Module), code(v.Commit), cell(v.Go), cell(v.SQLite), strconv.Itoa(v.Schema))
	md.blank()
	pragmas := make([]string, len(r.Pragmas))
	for i, p := range r.Pragmas {
		pragmas[i] = code(p)
	}
	md.line("PRAGMAs (in the DSN, in this order): %s", orDash(strings.Join(pragmas, ", ")))
	md.blank()
}

func (md mdWriter) checks(r Report) {
	md.line("## Acceptance checks")
	md.blank()
	if len(r.Checks) == 0 {
		md.line("No checks.")
		md.blank()
		return
	}
	md.table("Check", "Title", "Kind", "Inputs", "Observed", "Result", "Command")
	for _, c := range r.Checks {
		if len(c.Results) == 0 {
			md.row(cell(c.ID), cell(c.Title), "–", "–", "no result", "FAIL", "–")
			continue
		}
		for _, res := range c.Results {
			md.row(cell(c.ID), cell(c.Title), string(res.Kind), cell(res.Inputs), cell(res.Observed), verdict(res.Pass), code(res.Command))
		}
	}
	md.blank()
}

func (md mdWriter) about(lines []string) {
	for _, l := range lines {
		md.line("- %s", text(l))
	}
	if len(lines) > 0 {
		md.blank()
	}
}

func (md mdWriter) fixture(s Section) {
	md.line("## Fixture (simulated)")
	md.blank()
	md.about(s.About)
	if len(s.Sweeps) > 0 {
		md.line("### Sweeps")
		md.blank()
		md.table("Scenario", "Seeds", "Passed", "Failed", "Fault settings", "Fingerprints", "Command")
		for _, sw := range s.Sweeps {
			var prints []string
			for _, f := range sw.Fingerprints {
				prints = append(prints, fmt.Sprintf("%d: %s", f.Seed, code(shortHash(f.Fingerprint))))
			}
			md.row(cell(sw.Scenario), fmt.Sprintf("%s (%d)", seedRange(sw), sw.Seeds), strconv.Itoa(sw.Passed),
				strconv.Itoa(sw.Failed), cell(sw.Faults), orDash(strings.Join(prints, "<br>")), code(sw.Command))
		}
		md.blank()
		md.coverage(s.Sweeps)
	}
	md.timelines(s.Timelines)
}

func (md mdWriter) live(s Section) {
	md.line("## Live (real processes)")
	md.blank()
	md.about(s.About)
	if len(s.Outcomes) > 0 {
		md.line("### Outcomes")
		md.blank()
		md.table("Outcome", "Expected", "Observed", "At (wall ms)", "Result")
		for _, o := range s.Outcomes {
			md.row(cell(o.Name), cell(o.Expected), cell(o.Observed), strconv.FormatInt(o.AtMs, 10), verdict(o.Pass))
		}
		md.blank()
	}
	if len(s.Series) > 0 {
		md.series(s.Series)
	}
	md.timelines(s.Timelines)
}

func (md mdWriter) series(series []Series) {
	md.line("### Series")
	md.blank()
	md.table("Series", "Chart", "Unit", "Samples", "Min", "Max", "Last")
	for _, s := range series {
		st := statsOf(s.Points)
		md.row(cell(s.Name), cell(s.Chart), cell(s.Unit), strconv.Itoa(st.Samples), number(st.Min), number(st.Max), number(st.Last))
	}
	md.blank()
	for _, g := range groupSeries(series) {
		md.seriesTable(g)
	}
}

// seriesTable writes one chart's samples: a row per sampled time, a
// column per series.
func (md mdWriter) seriesTable(g chartGroup) {
	var xs []int64
	for _, s := range g.Series {
		for _, p := range s.Points {
			xs = append(xs, p.X)
		}
	}
	slices.Sort(xs)
	xs = slices.Compact(xs)
	shown := sampleEvenly(xs, seriesRowsMax)
	md.line("#### %s (%s)", text(g.Title), orDash(g.Unit))
	md.blank()
	if len(shown) < len(xs) {
		md.line("%d of %d sample times, evenly spaced.", len(shown), len(xs))
		md.blank()
	}
	head := []string{"t (wall ms)"}
	for _, s := range g.Series {
		head = append(head, cell(s.Name))
	}
	md.table(head...)
	for _, x := range shown {
		row := []string{strconv.FormatInt(x, 10)}
		for _, s := range g.Series {
			row = append(row, valueAt(s.Points, x))
		}
		md.row(row...)
	}
	md.blank()
}

// sampleEvenly keeps at most n of xs, evenly spaced, first and last kept.
func sampleEvenly(xs []int64, n int) []int64 {
	if len(xs) <= n || n < 2 {
		return xs
	}
	out := make([]int64, 0, n)
	for i := range n {
		out = append(out, xs[i*(len(xs)-1)/(n-1)])
	}
	return out
}

func valueAt(points []Point, x int64) string {
	for _, p := range points {
		if p.X == x {
			return number(p.Y)
		}
	}
	return "–"
}

func (md mdWriter) timelines(ts []Timeline) {
	if len(ts) == 0 {
		return
	}
	md.line("### Timelines")
	md.blank()
	for _, t := range ts {
		md.timeline(t, "####")
	}
}

// timeline describes a timeline in words: lanes, claims, faults, marks
// and the violation.
func (md mdWriter) timeline(t Timeline, heading string) {
	md.line("%s %s", heading, text(t.Title))
	md.blank()
	md.line("%s, %d to %d %s. Lanes: %s.", t.Kind, t.Start, t.End, t.Unit, strings.Join(lanesOf(t), ", "))
	if t.Caption != "" {
		md.blank()
		md.line("%s", text(t.Caption))
	}
	md.blank()
	if t.Violation != nil {
		v := t.Violation
		md.line("**Violation** at %d on %s: %s. %s", v.At, laneName(v.Lane), text(v.Label), text(v.Detail))
		md.blank()
	}
	if len(t.Bars) > 0 {
		md.table("Lane", "Claim", "Task", "Attempt", "Fence", "From", "To", "Detail")
		for _, b := range t.Bars {
			md.row(cell(laneName(b.Lane)), cell(b.Label), code(b.TaskID), strconv.Itoa(b.Attempt), strconv.FormatInt(b.Fence, 10),
				strconv.FormatInt(b.Start, 10), strconv.FormatInt(b.End, 10), cell(b.Detail))
		}
		md.blank()
	}
	if len(t.Shades) > 0 {
		for _, s := range t.Shades {
			where := "all lanes"
			if s.Lane != "" {
				where = s.Lane
			}
			md.line("- Fault %s on %s, %d to %d", text(s.Label), where, s.Start, s.End)
		}
		md.blank()
	}
	if len(t.Marks) > 0 {
		marks := slices.Clone(t.Marks)
		slices.SortStableFunc(marks, func(a, b Mark) int { return cmpInt64(a.At, b.At) })
		md.table("At", "Lane", "Kind", "Label", "Detail")
		for _, m := range marks {
			md.row(strconv.FormatInt(m.At, 10), cell(laneName(m.Lane)), cell(m.Kind), cell(m.Label), cell(m.Detail))
		}
		md.blank()
	}
}

func (md mdWriter) failed(a Attempt) {
	md.line("## Failed attempt: %s", text(a.Title))
	md.blank()
	md.line("Fixture (simulated). A broken variant of the queue, caught by the simulator, investigated and fixed.")
	md.blank()
	for _, p := range a.Story {
		md.line("%s", text(p))
		md.blank()
	}
	md.table("What", "Value")
	md.row("Variant", code(a.Variant))
	md.row("Scenario", cell(a.Scenario))
	md.row("Failing seed", strconv.FormatUint(a.Seed, 10))
	md.row("Seeds run to find it", strconv.Itoa(a.SeedsRun))
	md.row("Invariant broken", code(a.Invariant))
	md.row("Detail", cell(a.Detail))
	md.blank()
	md.line("Shrunk schedule (%d events):", len(a.Shrunk))
	md.blank()
	md.block(a.Shrunk...)
	md.blank()
	md.line("Replay the failure:")
	md.blank()
	md.block(a.Replay)
	md.blank()
	md.line("The same seeds against the real queue: %s", verdict(a.FixedPass))
	md.blank()
	md.block(a.FixedRun)
	md.blank()
	if len(a.Trace) > 0 {
		md.line("Trace of the shrunk run:")
		md.blank()
		md.block(a.Trace...)
		md.blank()
	}
	if a.Timeline != nil {
		md.timeline(*a.Timeline, "###")
	}
}

func (md mdWriter) commands(cs []Command) {
	md.line("## Commands that reproduce every figure")
	md.blank()
	if len(cs) == 0 {
		md.line("No commands.")
		return
	}
	md.table("What", "Command")
	for _, c := range cs {
		md.row(cell(c.What), code(c.Command))
	}
}

// coverage writes each sweep's coverage map: its declared cells and the
// seeds that reached each, then how many other cells were reached.
func (md mdWriter) coverage(sweeps []Sweep) {
	for _, sw := range sweeps {
		if len(sw.Coverage) == 0 {
			continue
		}
		md.line("### Coverage: %s (%d seeds)", sw.Scenario, sw.Seeds)
		md.blank()
		md.table("Declared cell", "Seeds reaching it")
		other := 0
		for _, c := range sw.Coverage {
			switch {
			case c.Declared:
				md.row(code(c.Cell), strconv.Itoa(c.Seeds))
			case c.Seeds > 0:
				other++
			}
		}
		md.blank()
		md.line("%d other cells reached.", other)
		md.blank()
	}
}

package reports

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"strconv"
	"strings"
)

//go:embed page.html.tmpl
var pageTemplate string

//go:embed page.css
var pageStyle string

var page = template.Must(template.New("page").Funcs(template.FuncMap{
	"verdict":   verdict,
	"kindlabel": kindLabel,
	"short":     shortHash,
	"seeds":     seedRange,
	"join":      strings.Join,
	"css":       func() template.CSS { return template.CSS(pageStyle) },
}).Parse(pageTemplate))

// HTML writes the report as one self-contained page: inline CSS, inline
// SVG charts and timelines, no scripts and no external references. Every
// text from the report is escaped. It refuses a report that Validate
// refuses, before writing anything.
func HTML(w io.Writer, r Report) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("html report: %w", err)
	}
	var b bytes.Buffer
	if err := page.Execute(&b, buildPage(r)); err != nil {
		return fmt.Errorf("html report: %w", err)
	}
	if _, err := w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("html report: %w", err)
	}
	return nil
}

func kindLabel(k Kind) string {
	switch k {
	case Fixture:
		return "FIXTURE"
	case Live:
		return "LIVE"
	}
	return strings.ToUpper(string(k))
}

// pageView is the whole page laid out for the template.
type pageView struct {
	Report   Report
	Summary  summary
	Commit   string
	Checks   []checkView
	Fixture  sectionView
	Live     sectionView
	Failed   *failedView
	Commands []Command
	// Index is the page's table of contents, the verdicts first: a line
	// for each section, with its verdict where it has one.
	Index []indexEntry
}

// indexEntry is one line of the page's index: the section's anchor,
// name, what it holds in a few words, and its verdict (Judged false for
// a section that has none: versions, commands).
type indexEntry struct {
	ID, Name, About string
	Judged, Pass    bool
}

type checkView struct {
	Check
	Pass    bool
	Span    int
	Results []Result
}

type sectionView struct {
	Section
	Charts       []chartView
	Timelines    []timelineView
	OutcomeTally tally
	SeedTally    tally // seeds passed and failed over every sweep
}

type failedView struct {
	Attempt
	ShrunkText string // the shrunk schedule, one event a line
	TraceText  string // the shrunk run's trace, one line each
	Timeline   *timelineView
}

func buildPage(r Report) pageView {
	v := pageView{Report: r, Summary: summarize(r), Commit: shortHash(r.Versions.Commit), Commands: r.Commands}
	for _, c := range r.Checks {
		cv := checkView{Check: c, Pass: c.Pass(), Span: max(1, len(c.Results)), Results: c.Results}
		v.Checks = append(v.Checks, cv)
	}
	timelines := 0
	nextTimeline := func(t Timeline) timelineView {
		timelines++
		return layoutTimeline("timeline-"+strconv.Itoa(timelines), t)
	}
	charts := 0
	for _, s := range []struct {
		in  Section
		out *sectionView
	}{{r.Fixture, &v.Fixture}, {r.Live, &v.Live}} {
		s.out.Section = s.in
		for _, t := range s.in.Timelines {
			s.out.Timelines = append(s.out.Timelines, nextTimeline(t))
		}
		for _, g := range groupSeries(s.in.Series) {
			charts++
			s.out.Charts = append(s.out.Charts, layoutChart("chart-"+strconv.Itoa(charts), g))
		}
		for _, o := range s.in.Outcomes {
			s.out.OutcomeTally.add(o.Pass)
		}
		for _, sw := range s.in.Sweeps {
			s.out.SeedTally.Pass += sw.Passed
			s.out.SeedTally.Fail += sw.Failed
		}
	}
	if r.Failed != nil {
		fv := &failedView{Attempt: *r.Failed, ShrunkText: strings.Join(r.Failed.Shrunk, "\n"), TraceText: strings.Join(r.Failed.Trace, "\n")}
		if r.Failed.Timeline != nil {
			t := nextTimeline(*r.Failed.Timeline)
			fv.Timeline = &t
		}
		v.Failed = fv
	}
	v.Index = buildIndex(v)
	return v
}

// buildIndex lists the page's sections in the order they appear, each
// with its verdict and a line of what it holds: the acceptance checks,
// the fixture and live results (each failing when one of its check
// results, sweeps, declared coverage cells or outcomes does), the failed
// attempt, then the versions and commands.
func buildIndex(v pageView) []indexEntry {
	idx := []indexEntry{{ID: "checks", Name: "Acceptance checks", Judged: true, Pass: v.Summary.Checks.Fail == 0 && v.Summary.Checks.Total() > 0,
		About: fmt.Sprintf("%d of %d pass", v.Summary.Checks.Pass, v.Summary.Checks.Total())}}
	fx := indexEntry{ID: "fixture", Name: "Fixture results", Judged: true, Pass: true}
	seeds, unreached := 0, 0
	for _, sw := range v.Fixture.Sweeps {
		seeds += sw.Seeds
		fx.Pass = fx.Pass && sw.Failed == 0
		for _, c := range sw.Coverage {
			if c.Declared && c.Seeds == 0 {
				unreached++
			}
		}
	}
	fx.Pass = fx.Pass && unreached == 0 && v.Summary.Fixture.Fail == 0
	fx.About = fmt.Sprintf("%d of %d check results pass; %d sweeps, %d seeds: %d passed, %d failed", v.Summary.Fixture.Pass, v.Summary.Fixture.Total(),
		len(v.Fixture.Sweeps), seeds, v.Fixture.SeedTally.Pass, v.Fixture.SeedTally.Fail)
	if unreached > 0 {
		fx.About += fmt.Sprintf("; %d declared coverage cells unreached", unreached)
	}
	if n := len(v.Fixture.Timelines); n > 0 {
		fx.About += fmt.Sprintf("; %d timeline%s", n, plural(n))
	}
	idx = append(idx, fx)
	lv := indexEntry{ID: "live", Name: "Live results", Judged: true, Pass: v.Live.OutcomeTally.Fail == 0 && v.Summary.Live.Fail == 0,
		About: fmt.Sprintf("%d of %d check results pass; %d of %d outcomes as expected; %d charts, %d timeline%s", v.Summary.Live.Pass, v.Summary.Live.Total(),
			v.Live.OutcomeTally.Pass, v.Live.OutcomeTally.Total(),
			len(v.Live.Charts), len(v.Live.Timelines), plural(len(v.Live.Timelines)))}
	idx = append(idx, lv)
	if f := v.Failed; f != nil {
		idx = append(idx, indexEntry{ID: "failed", Name: "Failed attempt", Judged: true, Pass: f.FixedPass,
			About: fmt.Sprintf("%s caught on seed %d; the same seeds against the real queue: %s", f.Variant, f.Seed, verdict(f.FixedPass))})
	}
	return append(idx,
		indexEntry{ID: "versions", Name: "Versions", About: "commit " + v.Commit + ", " + v.Report.Versions.Go + ", PRAGMAs"},
		indexEntry{ID: "commands", Name: "Commands", About: fmt.Sprintf("%d that reproduce every figure", len(v.Commands))})
}

// plural is "s" unless n is 1.
func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

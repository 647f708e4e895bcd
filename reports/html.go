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
	return v
}

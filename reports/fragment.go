package reports

import (
	"bytes"
	"fmt"
	"html/template"
	"strings"
)

// TimelineFigure draws one timeline as the HTML report draws it: a
// <figure> holding its inline SVG, caption and legend, for another page
// (the console's task page) to embed. id is the figure's element ID,
// unique within that page. Every text is escaped. It refuses a timeline
// whose bars or marks fall outside its range. A timeline with no Kind is
// drawn without a FIXTURE or LIVE label: a page that is no report (the
// console's task page, drawn from a queue's audit trail) says in its
// title and caption where the figure comes from.
func TimelineFigure(id string, t Timeline) (template.HTML, error) {
	if err := t.validate(); err != nil {
		return "", fmt.Errorf("timeline figure: %w", err)
	}
	var b bytes.Buffer
	if err := page.ExecuteTemplate(&b, "timeline", layoutTimeline(id, t)); err != nil {
		return "", fmt.Errorf("timeline figure: %w", err)
	}
	return template.HTML(b.String()), nil // executed by html/template: escaped
}

// timelineStyleFirst and timelineStyleLast bound, in page.css, the rules
// a timeline figure needs.
const (
	timelineStyleFirst = "figure {"
	timelineStyleLast  = "ul.legend svg { flex: none; }"
)

// TimelineStyle returns the CSS a page embedding TimelineFigure needs:
// the report's custom properties and its figure, SVG, lane, bar, mark and
// legend rules, taken from the report's own stylesheet so the two draw
// alike.
func TimelineStyle() template.CSS {
	root, _, _ := strings.Cut(pageStyle, "}")
	return template.CSS(root + "}\n" + styleRules(timelineStyleFirst, timelineStyleLast)) // the package's own stylesheet
}

// styleRules returns the rules of the report's stylesheet from the one
// starting with first to the one last, a line.
func styleRules(first, last string) string {
	rules := pageStyle
	if i := strings.Index(rules, first); i >= 0 {
		rules = rules[i:]
	}
	if i := strings.Index(rules, last); i >= 0 {
		rules = rules[:i+len(last)]
	}
	return rules + "\n"
}

// Chart is one small line chart for another page to embed (ChartFigure):
// its series share the chart, over the x axis Axis fixes.
type Chart struct {
	Title  string
	Unit   string
	Series []Series
	Axis   ChartAxis
}

// ChartAxis is a chart's x axis: the range From to To (in the series'
// X unit) drawn from edge to edge, the labels of its two ends, and its
// title.
type ChartAxis struct {
	From, To             int64
	StartLabel, EndLabel string
	Title                string
}

// ChartFigure draws one chart as the HTML report draws its charts: a
// <figure> holding its inline SVG, legend and caption (the minimum and
// maximum), for another page (the console's Live page) to embed. id is
// the figure's element ID, unique within that page. Every text is
// escaped. It refuses an axis that ends before it starts and a point
// outside it.
func ChartFigure(id string, c Chart) (template.HTML, error) {
	if c.Axis.To <= c.Axis.From {
		return "", fmt.Errorf("chart figure %q: the axis ends at %d, not after it starts at %d", c.Title, c.Axis.To, c.Axis.From)
	}
	for _, s := range c.Series {
		for _, p := range s.Points {
			if p.X < c.Axis.From || p.X > c.Axis.To {
				return "", fmt.Errorf("chart figure %q: series %s has a point at %d outside %d..%d", c.Title, s.Name, p.X, c.Axis.From, c.Axis.To)
			}
		}
	}
	axis := c.Axis
	var b bytes.Buffer
	if err := page.ExecuteTemplate(&b, "chart", layoutChart(id, chartGroup{Title: c.Title, Unit: c.Unit, Series: c.Series, axis: &axis})); err != nil {
		return "", fmt.Errorf("chart figure: %w", err)
	}
	return template.HTML(b.String()), nil // executed by html/template: escaped
}

// chartStyleFirst and chartStyleLast bound, in page.css, the rules a
// chart figure needs.
const (
	chartStyleFirst = ".charts {"
	chartStyleLast  = ".chart-foot ul.legend { margin: 0; gap: 2px 10px; }"
)

// ChartStyle returns the CSS a page embedding ChartFigure needs beside
// TimelineStyle's: the report's chart rules, from its own stylesheet.
func ChartStyle() template.CSS {
	return template.CSS(styleRules(chartStyleFirst, chartStyleLast)) // the package's own stylesheet
}

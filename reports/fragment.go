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
	rules := pageStyle
	if i := strings.Index(rules, timelineStyleFirst); i >= 0 {
		rules = rules[i:]
	}
	if i := strings.Index(rules, timelineStyleLast); i >= 0 {
		rules = rules[:i+len(timelineStyleLast)]
	}
	return template.CSS(root + "}\n" + rules + "\n") // the package's own stylesheet
}

package reports

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTimelineFigure(t *testing.T) {
	tl := Timeline{Title: "task <b>t1</b>", Kind: Live, Unit: "wall ms", Start: 0, End: 1000, Lanes: []string{"w1"},
		Bars:  []Bar{{Lane: "w1", Start: 100, End: 600, TaskID: "t1", Attempt: 1, Fence: 1, Label: "t1 f1", Detail: "claimed"}},
		Marks: []Mark{{At: 600, Kind: MarkState, Label: "completed", Detail: "running → completed"}}}
	html, err := TimelineFigure("task-timeline", tl)
	require.NoError(t, err)
	s := string(html)
	require.True(t, strings.HasPrefix(strings.TrimSpace(s), `<figure class="timeline live" id="task-timeline"`), s[:min(len(s), 120)])
	require.Contains(t, s, `<g class="bar"`)
	require.Contains(t, s, `data-fence="1"`)
	require.Contains(t, s, `<g class="mark`)
	require.Contains(t, s, "task &lt;b&gt;t1&lt;/b&gt;", "the title is escaped")
	require.NotContains(t, s, "<b>t1</b>")

	tl.Marks[0].At = 2000
	_, err = TimelineFigure("task-timeline", tl)
	require.ErrorContains(t, err, "outside", "a mark past the end is refused")
}

func TestTimelineStyle(t *testing.T) {
	css := string(TimelineStyle())
	for _, rule := range []string{"--line:", "--fault:", "--mono:", ".timeline-svg {", ".bar rect {", ".mark-state path {", "ul.legend svg { flex: none; }"} {
		require.Contains(t, css, rule)
	}
	require.NotContains(t, css, "body {", "only the figure's rules, not the report page's")
	require.NotContains(t, css, ".charts {")
}

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
	require.Contains(t, s, `<span class="kind live">LIVE</span>`)
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

// A timeline without a Kind carries no FIXTURE or LIVE label.
func TestTimelineFigureWithoutKind(t *testing.T) {
	html, err := TimelineFigure("task-timeline", Timeline{Title: "task t1", Unit: "ms", End: 10, Lanes: []string{"w1"}})
	require.NoError(t, err)
	s := string(html)
	require.True(t, strings.HasPrefix(strings.TrimSpace(s), `<figure class="timeline" id="task-timeline">`), s[:min(len(s), 120)])
	require.NotContains(t, s, `class="kind`)
}

func TestChartFigure(t *testing.T) {
	c := Chart{Title: "depth <i>now</i>", Unit: "tasks", Axis: ChartAxis{From: 0, To: 3_600_000, StartLabel: "08:00", EndLabel: "09:00 UTC", Title: "the last hour"},
		Series: []Series{{Name: "queued", Unit: "tasks", Points: []Point{{X: 60_000, Y: 3}, {X: 3_600_000, Y: 5}}},
			{Name: "running", Unit: "tasks", Points: []Point{{X: 60_000, Y: 1}, {X: 3_600_000, Y: 2}}}}}
	html, err := ChartFigure("depth", c)
	require.NoError(t, err)
	s := string(html)
	require.True(t, strings.HasPrefix(strings.TrimSpace(s), `<figure class="chart" id="depth">`), s[:min(len(s), 120)])
	require.Equal(t, 2, strings.Count(s, "<polyline"))
	require.Contains(t, s, `points="54.9,64 346,12"`, "the first point a sixtieth of the way along, at 3 of 5")
	for _, label := range []string{">08:00<", ">09:00 UTC<", ">the last hour<", "depth &lt;i&gt;now&lt;/i&gt;"} {
		require.Contains(t, s, label)
	}
	c.Series[0].Points[0].X = -1
	_, err = ChartFigure("depth", c)
	require.ErrorContains(t, err, "outside")
	c.Axis.To = 0
	_, err = ChartFigure("depth", c)
	require.ErrorContains(t, err, "ends")
	css := string(ChartStyle())
	require.True(t, strings.HasPrefix(css, ".charts {"), css)
	require.Contains(t, css, ".chart polyline {")
	require.NotContains(t, css, "body {")
}

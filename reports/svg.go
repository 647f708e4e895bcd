package reports

import (
	"math"
	"slices"
	"strconv"
	"strings"
)

// The geometry of the page's SVG: charts and timelines are laid out here,
// in Go, as plain numbers and strings, and html/template writes them out
// (escaping every text). All sizes are in SVG user units, which are CSS
// pixels at the page's natural width.

// Timeline geometry.
const (
	timelineWidth      = 1140.0
	timelineLabelWidth = 104.0 // the lane names, left of the plot
	timelineRightPad   = 16.0
	timelineHeadPad    = 6.0
	headRowHeight      = 15.0 // one row of fault or violation labels
	headRowsMax        = 3    // fault label rows before labels go to hover only
	laneLabelRow       = 15.0 // mark labels above the claims
	trackHeight        = 22.0 // one row of claims within a lane
	barHeight          = 15.0
	laneFootRow        = 17.0 // heartbeat ticks and mark labels below
	axisHeight         = 40.0
	fontSize           = 11.0
	smallFontSize      = 10.0
	charWidth          = 0.58 // average glyph width, in font sizes
	labelGap           = 6.0
	violationLabelMax  = 90 // characters drawn; the rest is in the hover text
)

// Chart geometry.
const (
	chartWidth   = 360.0
	chartHeight  = 176.0
	chartLeft    = 50.0
	chartRight   = 14.0
	chartTop     = 12.0
	chartBottom  = 34.0
	chartDotsMax = 40 // draw a dot per sample up to this many samples
)

// shadePrefix marks a fault's label.
const shadePrefix = "⚡ "

// taskColors colour claims by task, in order of first appearance.
var taskColors = []string{"#2563eb", "#0f766e", "#7c3aed", "#be185d", "#c2410c", "#4d7c0f", "#0e7490", "#a16207"}

// seriesColors colour the lines of one chart.
var seriesColors = []string{"#2563eb", "#16a34a", "#d97706", "#9333ea", "#dc2626", "#0891b2", "#4b5563", "#db2777"}

// f formats a coordinate with at most one decimal.
func f(x float64) string {
	s := strconv.FormatFloat(math.Round(x*10)/10, 'f', 1, 64)
	return strings.TrimSuffix(s, ".0")
}

// textWidth estimates how wide a label is drawn.
func textWidth(s string, size float64) float64 {
	return float64(len([]rune(s))) * size * charWidth
}

// clip cuts a label to n characters, marking the cut.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// timelineView is one timeline laid out for the template.
type timelineView struct {
	ID        string
	Title     string
	Kind      Kind
	Unit      string
	Caption   string
	Width     string
	Height    string
	PlotLeft  string
	PlotRight string
	PlotTop   string
	PlotBot   string
	LabelX    string
	Lanes     []laneView
	Ticks     []tickView
	AxisY     string
	TickY     string // the bottom of a tick mark
	AxisTitle axisTitle
	Shades    []shadeView
	Bars      []barView
	Marks     []markView
	Violation *violationView
	Legend    []legendView
	Describe  string // a one-line summary for screen readers
}

type axisTitle struct{ X, Y, Text string }

type laneView struct {
	Name   string
	Queue  bool
	Top    string
	Height string
	Mid    string
	Stripe bool
}

type tickView struct {
	X, Label string
}

type shadeView struct {
	X, Y, W, H     string
	Label          string
	ShowLabel      bool
	LabelX, LabelY string
	Hover          string
}

type barView struct {
	X, Y, W, H     string
	Color          string
	Label          string
	LabelX, LabelY string
	Hover          string
	TaskID         string
	Fence          string
	Violating      bool // the violation falls inside this claim
}

type markView struct {
	Kind           string
	Class          string
	D              string // the glyph's path
	Text           string // a character drawn on the glyph ("!")
	TextX, TextY   string
	Label          string
	LabelX, LabelY string
	ShowLabel      bool
	Hover          string
}

type violationView struct {
	X, Top, Bottom string
	Mark           markView
	Label          string
	LabelX, LabelY string
	BoxX, BoxY     string
	BoxW, BoxH     string
	Hover          string
}

type legendView struct {
	Class string
	D     string
	Text  string
	Name  string
	Color string // for task swatches
}

// laneLayout is where one lane sits and how its claims stack.
type laneLayout struct {
	top    float64
	tracks int
	// trackEnds[i] is where the last claim on track i ends, for stacking.
	trackEnds []int64
}

func (l laneLayout) height() float64 {
	return laneLabelRow + float64(max(1, l.tracks))*trackHeight + laneFootRow
}

// trackMid is the vertical centre of a track's claims.
func (l laneLayout) trackMid(track int) float64 {
	return l.top + laneLabelRow + float64(track)*trackHeight + barHeight/2 + 2
}

// labelRows hold labels placed left to right without overlap.
type labelRows struct {
	ends []float64
}

// place finds the first row where a label from x0 to x1 fits, or -1.
func (r *labelRows) place(x0, x1 float64) int {
	for i, end := range r.ends {
		if x0 >= end+labelGap {
			r.ends[i] = x1
			return i
		}
	}
	return -1
}

func newLabelRows(n int) *labelRows {
	ends := make([]float64, n)
	for i := range ends {
		ends[i] = math.Inf(-1)
	}
	return &labelRows{ends: ends}
}

// layoutTimeline lays a timeline out: lanes and their claim tracks, the
// time axis, fault shades with their labels above the lanes, claims as
// bars, marks as glyphs and the violation across every lane.
func layoutTimeline(id string, t Timeline) timelineView {
	l := newTimelineLayout(id, t)
	l.headRows()
	l.lanes()
	l.shades()
	l.bars()
	l.marks()
	l.violation()
	l.axis()
	l.legend()
	l.v.Describe = describeTimeline(t)
	return l.v
}

// placedShade is a fault shade and the head row its label went in (-1:
// no room).
type placedShade struct {
	shade Shade
	row   int
}

// trackKey names one claim track of one lane.
type trackKey struct {
	lane  string
	track int
}

// timelineLayout is a timeline being laid out, one part after another
// (layoutTimeline lists them in order): each part reads what the parts
// before it placed.
type timelineLayout struct {
	t                   Timeline
	v                   timelineView
	plotLeft, plotRight float64
	span                float64
	// The head rows, from headRows.
	violationRowY, headTop float64
	placed                 []placedShade
	// The lanes and the claims' tracks, from lanes.
	top, plotTop, plotBottom float64
	names                    []string
	layouts                  map[string]*laneLayout
	sorted                   []Bar // the bars by start
	barTrack                 []int // the track of each of sorted
	glyphsOn                 map[trackKey][]float64
	legendTasks              []legendView
	seenKinds                map[string]bool
}

func newTimelineLayout(id string, t Timeline) *timelineLayout {
	l := &timelineLayout{t: t, v: timelineView{ID: id, Title: t.Title, Kind: t.Kind, Unit: t.Unit, Caption: t.Caption},
		plotLeft: timelineLabelWidth, plotRight: timelineWidth - timelineRightPad, span: float64(t.End - t.Start)}
	if l.span <= 0 {
		l.span = 1
	}
	return l
}

// x is where instant at sits on the time axis (clamped to the timeline).
func (l *timelineLayout) x(at int64) float64 {
	at = min(max(at, l.t.Start), l.t.End)
	return l.plotLeft + float64(at-l.t.Start)/l.span*(l.plotRight-l.plotLeft)
}

// headRows places the head rows: the violation's label, then the fault
// shades' labels, left to right without overlap.
func (l *timelineLayout) headRows() {
	l.top = timelineHeadPad
	if l.t.Violation != nil {
		l.violationRowY = l.top
		l.top += headRowHeight + 4
	}
	shades := slices.Clone(l.t.Shades)
	slices.SortStableFunc(shades, func(a, b Shade) int { return cmpInt64(a.Start, b.Start) })
	rows := newLabelRows(headRowsMax)
	usedRows := 0
	for _, s := range shades {
		x0 := l.x(s.Start) + 3
		row := rows.place(x0, x0+textWidth(shadePrefix+s.Label, smallFontSize))
		if row+1 > usedRows {
			usedRows = row + 1
		}
		l.placed = append(l.placed, placedShade{s, row})
	}
	l.headTop = l.top
	l.top += float64(usedRows) * headRowHeight
}

// lanes stacks the lanes, each with enough tracks for its overlapping
// claims, and puts each claim on the first track free at its start.
func (l *timelineLayout) lanes() {
	l.names = lanesOf(l.t)
	l.layouts = make(map[string]*laneLayout, len(l.names))
	for _, n := range l.names {
		l.layouts[n] = &laneLayout{}
	}
	l.sorted = slices.Clone(l.t.Bars)
	slices.SortStableFunc(l.sorted, func(a, b Bar) int { return cmpInt64(a.Start, b.Start) })
	l.barTrack = make([]int, len(l.sorted))
	for i, b := range l.sorted {
		ll := l.layouts[laneName(b.Lane)]
		track := -1
		for k, end := range ll.trackEnds {
			if b.Start >= end {
				track = k
				break
			}
		}
		if track < 0 {
			track = len(ll.trackEnds)
			ll.trackEnds = append(ll.trackEnds, b.End)
			ll.tracks++
		} else {
			ll.trackEnds[track] = b.End
		}
		if b.End == b.Start {
			ll.trackEnds[track] = b.End + 1
		}
		l.barTrack[i] = track
	}
	l.plotTop = l.top
	for i, n := range l.names {
		ll := l.layouts[n]
		ll.top = l.top
		l.v.Lanes = append(l.v.Lanes, laneView{
			Name: n, Queue: n == queueLane && !slices.Contains(l.t.Lanes, queueLane),
			Top: f(ll.top), Height: f(ll.height()), Mid: f(ll.trackMid(0) + 4), Stripe: i%2 == 1,
		})
		l.top += ll.height()
	}
	l.plotBottom = l.top
}

// shades draws the fault shades over their lanes (or every lane), their
// labels in the head rows.
func (l *timelineLayout) shades() {
	for _, p := range l.placed {
		y0, y1 := l.plotTop, l.plotBottom
		if p.shade.Lane != "" {
			ll := l.layouts[p.shade.Lane]
			y0, y1 = ll.top, ll.top+ll.height()
		}
		x0, x1 := l.x(p.shade.Start), l.x(p.shade.End)
		sv := shadeView{
			X: f(x0), Y: f(y0), W: f(math.Max(x1-x0, 2)), H: f(y1 - y0),
			Label: shadePrefix + p.shade.Label, Hover: shadeHover(l.t, p.shade),
		}
		if p.row >= 0 {
			sv.ShowLabel = true
			sv.LabelX = f(x0 + 3)
			sv.LabelY = f(l.headTop + float64(p.row)*headRowHeight + 11)
		}
		l.v.Shades = append(l.v.Shades, sv)
	}
}

// trackOf is the track a mark's glyph sits on: its task's claim's.
func (l *timelineLayout) trackOf(m Mark) int {
	if m.TaskID == "" {
		return 0
	}
	for i, b := range l.sorted {
		if laneName(b.Lane) == laneName(m.Lane) && b.TaskID == m.TaskID && m.At >= b.Start && m.At <= b.End {
			return l.barTrack[i]
		}
	}
	return 0
}

// bars draws the claims as bars, coloured by task, labelled where no glyph
// covers the label; the claim the violation falls in is outlined in red.
func (l *timelineLayout) bars() {
	l.glyphsOn = make(map[trackKey][]float64)
	for _, m := range append(slices.Clone(l.t.Marks), violationMarks(l.t)...) {
		if m.Kind != MarkHeartbeat {
			k := trackKey{laneName(m.Lane), l.trackOf(m)}
			l.glyphsOn[k] = append(l.glyphsOn[k], l.x(m.At))
		}
	}
	colors := make(map[string]string)
	for i, b := range l.sorted {
		if _, ok := colors[b.TaskID]; !ok {
			colors[b.TaskID] = taskColors[len(colors)%len(taskColors)]
			l.legendTasks = append(l.legendTasks, legendView{Class: "swatch", Name: "task " + b.TaskID, Color: colors[b.TaskID]})
		}
		ll := l.layouts[laneName(b.Lane)]
		mid := ll.trackMid(l.barTrack[i])
		x0, x1 := l.x(b.Start), l.x(b.End)
		w := math.Max(x1-x0, 3)
		bv := barView{
			X: f(x0), Y: f(mid - barHeight/2), W: f(w), H: f(barHeight), Color: colors[b.TaskID],
			Hover: barHover(l.t, b), TaskID: b.TaskID, Fence: strconv.FormatInt(b.Fence, 10),
			LabelY: f(mid + 3.8),
		}
		if vm := l.t.Violation; vm != nil && laneName(vm.Lane) == laneName(b.Lane) && vm.At >= b.Start && vm.At <= b.End &&
			(vm.TaskID == "" || vm.TaskID == b.TaskID) {
			bv.Violating = true
		}
		label := b.Label
		if label == "" {
			label = b.TaskID + " f" + strconv.FormatInt(b.Fence, 10)
		}
		free := freeSpans(x0+3, x0+w-3, l.glyphsOn[trackKey{laneName(b.Lane), l.barTrack[i]}])
		for _, candidate := range []string{label, "f" + strconv.FormatInt(b.Fence, 10)} {
			if at, ok := fit(free, textWidth(candidate, smallFontSize)+4); ok {
				bv.Label, bv.LabelX = candidate, f(at+2)
				break
			}
		}
		l.v.Bars = append(l.v.Bars, bv)
	}
}

// marks draws the marks as glyphs on their claim's track, each label above
// or below its lane where there is room.
func (l *timelineLayout) marks() {
	marks := slices.Clone(l.t.Marks)
	slices.SortStableFunc(marks, func(a, b Mark) int { return cmpInt64(a.At, b.At) })
	above := make(map[string]*labelRows, len(l.names))
	below := make(map[string]*labelRows, len(l.names))
	for _, n := range l.names {
		above[n], below[n] = newLabelRows(1), newLabelRows(1)
	}
	l.seenKinds = make(map[string]bool)
	for _, m := range marks {
		l.seenKinds[m.Kind] = true
		n := laneName(m.Lane)
		ll := l.layouts[n]
		track := l.trackOf(m)
		mv := glyph(m.Kind, l.x(m.At), ll.trackMid(track))
		mv.Label, mv.Hover = m.Label, markHover(l.t, m)
		if m.Kind != MarkHeartbeat && m.Label != "" {
			w := textWidth(m.Label, smallFontSize)
			x0 := l.x(m.At) - w/2
			x0 = min(max(x0, l.plotLeft), l.plotRight-w)
			// A label goes on the side of the lane nearer its glyph's
			// track, or the other side when that one is taken.
			aboveY, belowY := f(ll.top+11), f(ll.top+ll.height()-4)
			first, second := above[n], below[n]
			firstY, secondY := aboveY, belowY
			if ll.tracks > 1 && track >= ll.tracks/2 {
				first, second, firstY, secondY = second, first, secondY, firstY
			}
			if first.place(x0, x0+w) == 0 {
				mv.ShowLabel, mv.LabelX, mv.LabelY = true, f(x0), firstY
			} else if second.place(x0, x0+w) == 0 {
				mv.ShowLabel, mv.LabelX, mv.LabelY = true, f(x0), secondY
			}
		}
		l.v.Marks = append(l.v.Marks, mv)
	}
}

// violation draws the violation: a red rule across every lane, a glyph on
// its lane and a label in the top row.
func (l *timelineLayout) violation() {
	m := l.t.Violation
	if m == nil {
		return
	}
	ll := l.layouts[laneName(m.Lane)]
	vx := l.x(m.At)
	mark := glyph(MarkViolation, vx, ll.trackMid(l.trackOf(*m)))
	mark.Hover = markHover(l.t, *m)
	label := "VIOLATION: " + clip(m.Label, violationLabelMax)
	w := textWidth(label, fontSize) + 10
	boxX := min(max(vx-w/2, l.plotLeft), l.plotRight-w)
	l.v.Violation = &violationView{
		X: f(vx), Top: f(l.violationRowY + headRowHeight + 1), Bottom: f(l.plotBottom),
		Mark: mark, Label: label, Hover: mark.Hover,
		BoxX: f(boxX), BoxY: f(l.violationRowY), BoxW: f(w), BoxH: f(headRowHeight + 1),
		LabelX: f(boxX + 5), LabelY: f(l.violationRowY + 11.5),
	}
}

// axis draws the time axis, its ticks in the timeline's own unit, and
// sets the figure's size.
func (l *timelineLayout) axis() {
	v := &l.v
	v.AxisY, v.TickY = f(l.plotBottom), f(l.plotBottom+4)
	for _, tick := range niceTicks(l.t.Start, l.t.End, 10) {
		v.Ticks = append(v.Ticks, tickView{X: f(l.x(tick)), Label: strconv.FormatInt(tick, 10)})
	}
	v.AxisTitle = axisTitle{X: f((l.plotLeft + l.plotRight) / 2), Y: f(l.plotBottom + 32), Text: "time (" + orDash(l.t.Unit) + ")"}
	v.Width, v.Height = f(timelineWidth), f(l.plotBottom+axisHeight)
	v.PlotLeft, v.PlotRight, v.PlotTop, v.PlotBot = f(l.plotLeft), f(l.plotRight), f(l.plotTop), f(l.plotBottom)
	v.LabelX = f(timelineLabelWidth - 10)
}

// legend lists every glyph the timeline uses, then its tasks.
func (l *timelineLayout) legend() {
	v := &l.v
	v.Legend = append(v.Legend, legendView{Class: "swatch", Name: "claim (label: task, fence)", Color: "#64748b"})
	for _, k := range []string{MarkHeartbeat, MarkExpiry, MarkStale, MarkEffect, MarkState, MarkFault} {
		if l.seenKinds[k] {
			g := glyph(k, 9, 9)
			if k == MarkHeartbeat {
				g.D = "M9 3v12"
			}
			v.Legend = append(v.Legend, legendView{Class: g.Class, D: g.D, Text: g.Text, Name: markNames[k]})
		}
	}
	if len(l.t.Shades) > 0 {
		v.Legend = append(v.Legend, legendView{Class: "shade-key", Name: "fault (shaded)"})
	}
	if l.t.Violation != nil || l.seenKinds[MarkViolation] {
		g := glyph(MarkViolation, 9, 9)
		v.Legend = append(v.Legend, legendView{Class: g.Class, D: g.D, Text: g.Text, Name: markNames[MarkViolation]})
	}
	v.Legend = append(v.Legend, l.legendTasks...)
}

// violationMarks is the violation as a list of marks (empty or one).
func violationMarks(t Timeline) []Mark {
	if t.Violation == nil {
		return nil
	}
	return []Mark{*t.Violation}
}

// glyphClearance is how far a bar's label keeps from a glyph's centre.
const glyphClearance = 8.0

// span is a stretch of a bar free of glyphs.
type span struct{ from, to float64 }

// freeSpans splits from..to around the glyphs drawn on it.
func freeSpans(from, to float64, glyphs []float64) []span {
	xs := slices.Clone(glyphs)
	slices.Sort(xs)
	var spans []span
	at := from
	for _, g := range xs {
		if g+glyphClearance < at || g-glyphClearance > to {
			continue
		}
		if g-glyphClearance > at {
			spans = append(spans, span{at, g - glyphClearance})
		}
		at = math.Max(at, g+glyphClearance)
	}
	if to > at {
		spans = append(spans, span{at, to})
	}
	return spans
}

// fit finds the leftmost free span at least width wide.
func fit(spans []span, width float64) (float64, bool) {
	for _, s := range spans {
		if s.to-s.from >= width {
			return s.from, true
		}
	}
	return 0, false
}

// markNames are the legend's words for each mark kind.
var markNames = map[string]string{
	MarkHeartbeat: "heartbeat",
	MarkExpiry:    "lease expired",
	MarkStale:     "stale write refused",
	MarkEffect:    "effect applied",
	MarkState:     "state change",
	MarkFault:     "fault injected",
	MarkViolation: "invariant violated",
}

// glyph draws a mark kind at (x, y): a tick for a heartbeat, a cross for
// a lease expiry, a warning sign for a stale write, a diamond for an
// effect, a dot for a state change, a triangle for a fault and a red disc
// for a violation.
func glyph(kind string, x, y float64) markView {
	m := markView{Kind: kind, Class: "mark-" + strings.ReplaceAll(kind, "_", "-")}
	switch kind {
	case MarkHeartbeat:
		m.D = "M" + f(x) + " " + f(y+barHeight/2+1) + "v6"
	case MarkExpiry:
		m.D = "M" + f(x-4.5) + " " + f(y-4.5) + "l9 9M" + f(x+4.5) + " " + f(y-4.5) + "l-9 9"
	case MarkStale:
		m.D = circle(x, y, 6.5)
		m.Text, m.TextX, m.TextY = "!", f(x), f(y+3.8)
	case MarkEffect:
		m.D = "M" + f(x) + " " + f(y-6) + "l6 6-6 6-6-6z"
	case MarkState:
		m.D = circle(x, y, 4)
	case MarkFault:
		m.D = "M" + f(x) + " " + f(y-6) + "l6 10.5h-12z"
	case MarkViolation:
		m.D = circle(x, y, 7)
		m.Text, m.TextX, m.TextY = "✕", f(x), f(y+3.6)
	default:
		m.Class = "mark-other"
		m.D = circle(x, y, 3.5)
	}
	return m
}

// circle is a path for a circle of radius r at (x, y).
func circle(x, y, r float64) string {
	return "M" + f(x-r) + " " + f(y) + "a" + f(r) + " " + f(r) + " 0 1 0 " + f(2*r) + " 0a" + f(r) + " " + f(r) + " 0 1 0 " + f(-2*r) + " 0z"
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// niceTicks picks round tick values (1, 2 or 5 times a power of ten)
// from start to end, at most about n of them.
func niceTicks(start, end int64, n int) []int64 {
	if end <= start {
		return []int64{start}
	}
	step := niceStep(float64(end-start) / float64(n))
	first := (start + step - 1) / step * step
	if start < 0 {
		first = start / step * step
	}
	var ticks []int64
	for t := first; t <= end; t += step {
		ticks = append(ticks, t)
	}
	return ticks
}

func niceStep(raw float64) int64 {
	if raw <= 1 {
		return 1
	}
	power := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*power >= raw {
			return int64(m * power)
		}
	}
	return int64(10 * power)
}

// describeTimeline says in one line what a timeline shows.
func describeTimeline(t Timeline) string {
	s := strconv.Itoa(len(lanesOf(t))) + " lanes, " + strconv.Itoa(len(t.Bars)) + " claims, " +
		strconv.Itoa(len(t.Marks)) + " marks, " + strconv.Itoa(len(t.Shades)) + " faults"
	if t.Violation != nil {
		s += ", violation at " + strconv.FormatInt(t.Violation.At, 10) + " " + t.Unit
	}
	return s
}

// chartView is one small line chart laid out for the template.
type chartView struct {
	ID                    string
	Title                 string
	Unit                  string
	Width, Height         string
	Left, Right, Top, Bot string
	MidY                  string
	Lines                 []lineView
	YMax, YMin            tickView // labels at the top and bottom of the y axis
	YMaxY, YMinY          string
	XStart, XEnd          tickView
	XLabelY               string
	XTitle                axisTitle
	Caption               string
	Legend                bool
}

type lineView struct {
	Name   string
	Color  string
	Points string
	Dots   []dotView
	Hover  string
}

type dotView struct {
	X, Y  string
	Hover string
}

// layoutChart lays out one chart of one or more series over wall time.
func layoutChart(id string, g chartGroup) chartView {
	v := chartView{ID: id, Title: g.Title, Unit: g.Unit, Legend: len(g.Series) > 1}
	left, right := chartLeft, chartWidth-chartRight
	top, bottom := chartTop, chartHeight-chartBottom
	var xMin, xMax int64
	var yMin, yMax float64
	first := true
	for _, s := range g.Series {
		for _, p := range s.Points {
			if first {
				xMin, xMax, yMin, yMax = p.X, p.X, p.Y, p.Y
				first = false
				continue
			}
			xMin, xMax = min(xMin, p.X), max(xMax, p.X)
			yMin, yMax = math.Min(yMin, p.Y), math.Max(yMax, p.Y)
		}
	}
	dataMin, dataMax := yMin, yMax
	lo, hi := math.Min(0, yMin), yMax
	if hi <= lo {
		hi = lo + 1
	}
	if a := g.axis; a != nil {
		xMin, xMax = a.From, a.To
	}
	xSpan := float64(xMax - xMin)
	if xSpan <= 0 {
		xSpan = 1
	}
	px := func(x int64) float64 { return left + float64(x-xMin)/xSpan*(right-left) }
	py := func(y float64) float64 { return bottom - (y-lo)/(hi-lo)*(bottom-top) }
	for i, s := range g.Series {
		lv := lineView{Name: s.Name, Color: seriesColors[i%len(seriesColors)]}
		var pts []string
		for _, p := range s.Points {
			pts = append(pts, f(px(p.X))+","+f(py(p.Y)))
			if len(s.Points) <= chartDotsMax {
				hover := s.Name + ": " + number(p.Y) + " " + s.Unit
				if g.axis == nil { // a fixed axis's unit is its page's
					hover += " at " + strconv.FormatInt(p.X, 10) + " ms"
				}
				lv.Dots = append(lv.Dots, dotView{X: f(px(p.X)), Y: f(py(p.Y)), Hover: hover})
			}
		}
		lv.Points = strings.Join(pts, " ")
		st := statsOf(s.Points)
		lv.Hover = s.Name + " (" + s.Unit + "): " + strconv.Itoa(st.Samples) + " samples, min " + number(st.Min) + ", max " + number(st.Max) + ", last " + number(st.Last)
		v.Lines = append(v.Lines, lv)
	}
	v.Width, v.Height = f(chartWidth), f(chartHeight)
	v.Left, v.Right, v.Top, v.Bot = f(left), f(right), f(top), f(bottom)
	v.MidY = f((top + bottom) / 2)
	v.YMax = tickView{X: f(left - 5), Label: number(hi)}
	v.YMin = tickView{X: f(left - 5), Label: number(lo)}
	v.YMaxY, v.YMinY = f(top+4), f(bottom+1)
	v.XStart = tickView{X: f(left), Label: wallTime(xMin, xMax-xMin)}
	v.XEnd = tickView{X: f(right), Label: wallTime(xMax, xMax-xMin)}
	v.XLabelY = f(bottom + 14)
	v.XTitle = axisTitle{X: f((left + right) / 2), Y: f(bottom + 28), Text: "wall time since start"}
	if a := g.axis; a != nil {
		v.XStart.Label, v.XEnd.Label, v.XTitle.Text = a.StartLabel, a.EndLabel, a.Title
	}
	if first {
		v.Caption = "no samples"
	} else {
		v.Caption = "min " + number(dataMin) + " · max " + number(dataMax) + " " + g.Unit
	}
	return v
}

// wallTime labels a time axis value in ms, or seconds for longer spans.
func wallTime(ms, span int64) string {
	if span >= 2000 {
		return number(math.Round(float64(ms)/100)/10) + " s"
	}
	return strconv.FormatInt(ms, 10) + " ms"
}

package console

import (
	"bytes"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/reports"
)

// view is what every page's template gets: who is signed in, what the
// token may do (which decides the links and buttons shown, never what is
// allowed), the CSRF token for its forms, a one-time message, and the
// page's own data.
type view struct {
	Title   string
	Nav     string
	Who     *Principal
	CSRF    string
	Flash   string
	Error   string
	Back    string
	Submit  bool // may submit
	Approve bool // may approve and reject
	Operate bool // may requeue, resolve, inspect and see limits
	Cancel  bool // may cancel (submit or operate)
	Now     time.Time
	Data    any
}

// view starts a page's view for req (nil when nobody is signed in).
func (c *Console) view(req *request, title string) *view {
	v := &view{Title: title, Now: c.clock.Now()}
	if req != nil {
		p := req.p
		v.Who, v.CSRF = &p, req.ses.csrf
		v.Flash = c.sessions.takeFlash(req.ses)
		v.Error = c.sessions.takeRefusal(req.ses)
		v.Submit, v.Approve, v.Operate = p.Can(model.ScopeSubmit), p.Can(model.ScopeApprove), p.Can(model.ScopeOperate)
		v.Cancel = v.Submit || v.Operate
	}
	return v
}

var funcs = template.FuncMap{
	"time": func(t time.Time) string {
		if t.IsZero() {
			return "–"
		}
		return t.UTC().Format(time.RFC3339)
	},
	"age": func(now, t time.Time) string {
		if t.IsZero() {
			return "–"
		}
		return roundDuration(now.Sub(t)).String()
	},
	"dur": func(d time.Duration) string { return roundDuration(d).String() },
	// lease says how long a lease has left at now, or how long ago it ran out.
	"lease": func(now, until time.Time) string {
		if left := until.Sub(now); left > 0 {
			return "in " + roundDuration(left).String()
		}
		return "ran out " + roundDuration(now.Sub(until)).String() + " ago"
	},
	"terminal": func(s model.State) bool { return s.Terminal() },
	"join":     strings.Join,
	// decision is what the approve and reject buttons need.
	"decision": func(t model.Task, csrf string) decisionView { return decisionView{Task: t, CSRF: csrf} },
	// review is what the requeue and resolve forms need.
	"review": func(t model.Task, l model.Limits, csrf string) reviewView {
		return reviewView{Task: t, Limits: l, CSRF: csrf}
	},
	"limit": func(n int) string {
		switch {
		case n == model.Inherit:
			return "the default"
		case n == 0:
			return "unlimited"
		}
		return strconv.Itoa(n)
	},
}

type decisionView struct {
	Task model.Task
	CSRF string
}

type reviewView struct {
	Task   model.Task
	Limits model.Limits
	CSRF   string
}

// roundDuration rounds d for reading: to the second above a minute, the
// millisecond below.
func roundDuration(d time.Duration) time.Duration {
	if d > time.Minute || d < -time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

// parsePages parses each page template together with the layout.
func parsePages() (map[string]*template.Template, error) {
	layout, err := template.New("layout.html.tmpl").Funcs(funcs).ParseFS(files, "templates/layout.html.tmpl", "templates/partials.html.tmpl")
	if err != nil {
		return nil, fmt.Errorf("console: templates: %w", err)
	}
	names, err := fs.Glob(files, "templates/*.html.tmpl")
	if err != nil {
		return nil, fmt.Errorf("console: templates: %w", err)
	}
	pages := map[string]*template.Template{}
	for _, name := range names {
		base := strings.TrimSuffix(path.Base(name), ".html.tmpl")
		if base == "layout" || base == "partials" {
			continue
		}
		t, err := template.Must(layout.Clone()).ParseFS(files, name)
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", base, err)
		}
		pages[base] = t
	}
	return pages, nil
}

// render executes a page into a buffer first, so a template failure
// answers 500 instead of half a page.
func (c *Console) render(w http.ResponseWriter, status int, page string, v *view) {
	var b bytes.Buffer
	t, ok := c.pages[page]
	if !ok {
		c.log.Error("console: no such page template", "page", page)
		http.Error(w, "console: internal error", http.StatusInternalServerError)
		return
	}
	if err := t.ExecuteTemplate(&b, "layout.html.tmpl", v); err != nil {
		c.log.Error("console: render", "page", page, "error", err.Error())
		http.Error(w, "console: internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// style serves the console's stylesheet: the report's timeline and chart
// rules, then its own.
func (c *Console) style(w http.ResponseWriter, _ *http.Request) {
	own, err := files.ReadFile("templates/style.css")
	if err != nil {
		http.Error(w, "console: internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Header().Set("Cache-Control", "max-age=300")
	_, _ = w.Write([]byte(reports.TimelineStyle()))
	_, _ = w.Write([]byte(reports.ChartStyle()))
	_, _ = w.Write(own)
}

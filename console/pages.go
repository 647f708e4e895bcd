package console

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/reports"
	"github.com/leasehold/leasehold/wire"
)

// tokenBytesMax bounds the secret accepted at sign-in.
const tokenBytesMax = 4096

// eventsShownMax bounds the rows of a task page's event table (the
// timeline draws them all).
const eventsShownMax = 500

func (c *Console) signinPage(w http.ResponseWriter, r *http.Request) {
	if _, ok := c.signedIn(r); ok {
		http.Redirect(w, r, "/ui/tasks", http.StatusSeeOther)
		return
	}
	c.renderSignin(w, r, http.StatusOK, "")
}

// renderSignin draws the sign-in form under a fresh anonymous session,
// which exists only to carry the form's CSRF token.
func (c *Console) renderSignin(w http.ResponseWriter, r *http.Request, status int, msg string) {
	id, ses, err := c.sessions.create(nil)
	if err != nil {
		c.log.Warn("console: cannot make a session", "error", err.Error())
		c.refuse(w, r, nil, http.StatusServiceUnavailable, "The console cannot start a session now; retry later.")
		return
	}
	if old, err := r.Cookie(cookieName); err == nil {
		c.sessions.revoke(old.Value)
	}
	setCookie(w, r, id)
	v := c.view(nil, "Sign in")
	v.CSRF, v.Error = ses.csrf, msg
	c.render(w, status, "signin", v)
}

// signin checks the token and, if it is valid, replaces whatever session
// the browser had with a fresh one under a new ID.
func (c *Console) signin(w http.ResponseWriter, r *http.Request) {
	cookie, err := r.Cookie(cookieName)
	var ses *session
	ok := err == nil
	if ok {
		ses, ok = c.sessions.get(cookie.Value)
	}
	if !ok {
		c.refuse(w, r, nil, http.StatusForbidden, "The sign-in form expired; nothing was changed. Open the sign-in page again.")
		return
	}
	if !c.checkForm(w, r, ses) {
		return
	}
	secret := r.PostForm.Get("token")
	if secret == "" || len(secret) > tokenBytesMax {
		c.renderSignin(w, r, http.StatusBadRequest, "Paste a token (the secret from the tokens file).")
		return
	}
	p, err := c.backend.Authenticate(r.Context(), secret, r.RemoteAddr)
	if err != nil {
		status := statusOf(err)
		msg := "That token was not recognised."
		if status != http.StatusUnauthorized {
			c.log.Warn("console: sign-in failed", "error", oneLine(err.Error()))
			msg = "Sign-in is unavailable now; retry later."
		}
		c.renderSignin(w, r, status, msg)
		return
	}
	c.sessions.revoke(cookie.Value)
	id, fresh, err := c.sessions.create(&p)
	if err != nil {
		c.refuse(w, r, nil, http.StatusServiceUnavailable, "The console cannot start a session now; retry later.")
		return
	}
	c.log.Info("console: signed in", "token", p.Name)
	setCookie(w, r, id)
	c.sessions.setFlash(fresh, "Signed in as "+p.Name+".")
	http.Redirect(w, r, "/ui/tasks", http.StatusSeeOther)
}

func (c *Console) signout(w http.ResponseWriter, r *http.Request, req *request) error {
	c.sessions.revoke(req.id)
	setCookie(w, r, "")
	http.Redirect(w, r, "/ui/signin", http.StatusSeeOther)
	return nil
}

// tasksView is the task list's data: the filters as the URL gives them,
// the links that keep them (the first page, the other order), and the
// search.
type tasksView struct {
	State  string
	User   string
	Kind   string
	Order  string // "newest" or "oldest"
	States []model.State
	Tasks  []model.Task
	Next   string // the next page's URL, "" on the last
	First  bool
	// FirstURL is the first page's URL with the same filters; OrderURL the
	// same list in the other order.
	FirstURL, OrderURL string
	Search             string // what was searched for
	Found              bool   // Tasks are the search's matches
}

// Orders of the task list.
const (
	orderNewest = "newest"
	orderOldest = "oldest"
)

// searchBytesMax bounds a search: a task ID or an idempotency key.
const searchBytesMax = model.KeyLengthMax

// searchUsersMax bounds the users a search by key looks under when it
// names none: those of a token bound to a few users.
const searchUsersMax = 16

func (c *Console) tasksPage(w http.ResponseWriter, r *http.Request, req *request) error {
	q := r.URL.Query()
	tv := tasksView{User: q.Get("user"), Kind: q.Get("kind"), Order: q.Get("order"), States: model.States(), First: q.Get("after") == ""}
	switch tv.Order {
	case "":
		tv.Order = orderNewest
	case orderNewest, orderOldest:
	default:
		return &model.ValidationError{Field: "order", Problem: "want newest or oldest, got " + strconv.Quote(oneLine(tv.Order))}
	}
	f := TaskFilter{User: tv.User, Kind: tv.Kind, After: q.Get("after"), Limit: c.pageSize, Newest: tv.Order == orderNewest}
	if s := q.Get("state"); s != "" {
		state, err := model.ParseState(s)
		if err != nil {
			return &model.ValidationError{Field: "state", Problem: err.Error()}
		}
		f.State = state
	}
	tv.State = string(f.State)
	if f.User != "" {
		if err := model.CheckName("user", f.User); err != nil {
			return err
		}
	}
	if f.Kind != "" {
		if err := model.CheckKind("kind", f.Kind); err != nil {
			return err
		}
	}
	filters := url.Values{}
	for k, v := range map[string]string{"state": tv.State, "user": tv.User, "kind": tv.Kind, "order": tv.Order} {
		if v != "" && (k != "order" || v != orderNewest) {
			filters.Set(k, v)
		}
	}
	tv.FirstURL = withQuery("/ui/tasks", filters)
	other := url.Values{}
	maps.Copy(other, filters)
	if tv.Order == orderNewest {
		other.Set("order", orderOldest)
	} else {
		other.Del("order")
	}
	tv.OrderURL = withQuery("/ui/tasks", other)
	if search := strings.TrimSpace(q.Get("q")); search != "" {
		return c.search(w, r, req, tv, search)
	}
	page, err := c.backend.List(r.Context(), req.p, f)
	if err != nil {
		return err
	}
	tv.Tasks = page.Tasks
	if page.Next != "" {
		next := url.Values{}
		maps.Copy(next, filters)
		next.Set("after", page.Next)
		tv.Next = withQuery("/ui/tasks", next)
	}
	v := c.view(req, "Tasks")
	v.Nav, v.Data = "tasks", tv
	c.render(w, http.StatusOK, "tasks", v)
	return nil
}

// withQuery is path with the query q, if any.
func withQuery(path string, q url.Values) string {
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

// search finds a task by its ID, and goes to it, or by an idempotency
// key: under the user the filter names, or else under each user the
// token acts for (a token for every user must name one, a key being
// unique per user only, unless what it searched for is shaped as a task
// ID). One match goes to the task; several (a key used by several users)
// are listed; none says so.
func (c *Console) search(w http.ResponseWriter, r *http.Request, req *request, tv tasksView, search string) error {
	if len(search) > searchBytesMax {
		return &model.ValidationError{Field: "q", Problem: fmt.Sprintf("a task ID or an idempotency key is at most %d bytes", searchBytesMax)}
	}
	tv.Search, tv.Found = search, true
	var found []model.Task
	byID := strings.HasPrefix(search, model.TaskIDPrefix)
	if byID && model.CheckName("q", search) == nil {
		t, err := c.backend.Task(r.Context(), req.p, search)
		switch {
		case err == nil:
			found = append(found, t)
		case !errors.Is(err, model.ErrNotFound) && !errors.Is(err, model.ErrInvalidInput):
			return err
		}
	}
	if len(found) == 0 && (tv.User != "" || !byID || !req.p.AllUsers()) {
		users := []string{tv.User}
		if tv.User == "" {
			if req.p.AllUsers() {
				return &model.ValidationError{Field: "user", Problem: "name the user to search by idempotency key: a key is unique per user (or search by task ID)"}
			}
			users = req.p.Users[:min(len(req.p.Users), searchUsersMax)]
		}
		for _, user := range users {
			t, err := c.backend.TaskByKey(r.Context(), req.p, user, search)
			switch {
			case err == nil:
				found = append(found, t)
			case !errors.Is(err, model.ErrNotFound) && !errors.Is(err, model.ErrInvalidInput):
				return err
			}
		}
	}
	if len(found) == 1 {
		http.Redirect(w, r, "/ui/tasks/"+found[0].ID, http.StatusSeeOther)
		return nil
	}
	tv.Tasks = found
	v := c.view(req, "Tasks")
	v.Nav, v.Data = "tasks", tv
	status := http.StatusOK
	if len(found) == 0 {
		status = http.StatusNotFound
	}
	c.render(w, status, "tasks", v)
	return nil
}

// taskView is one task's page.
type taskView struct {
	Task        model.Task
	Events      []model.Event // the last eventsShownMax
	EventsTotal int
	Effects     []model.Effect
	Timeline    template.HTML
	Grant       *model.Limits // the grant maximum, for operators
}

func (c *Console) taskPage(w http.ResponseWriter, r *http.Request, req *request) error {
	id, err := taskID(r)
	if err != nil {
		return err
	}
	t, err := c.backend.Task(r.Context(), req.p, id)
	if err != nil {
		return err
	}
	events, err := c.backend.Events(r.Context(), req.p, id)
	if err != nil {
		return err
	}
	effects, err := c.backend.Effects(r.Context(), req.p, id)
	if err != nil {
		return err
	}
	tv := taskView{Task: t, Events: events, Effects: effects, EventsTotal: len(events)}
	if len(events) > eventsShownMax {
		tv.Events = events[len(events)-eventsShownMax:]
	}
	if len(events) > 0 {
		figure, err := reports.TimelineFigure("task-timeline", taskTimeline(t, events))
		if err != nil {
			return fmt.Errorf("console: draw the timeline of %s: %w", id, err)
		}
		tv.Timeline = figure
	}
	if t.State == model.NeedsReview && req.p.Can(model.ScopeOperate) {
		limits, _, err := c.backend.Limits(r.Context(), req.p)
		if err != nil {
			return err
		}
		tv.Grant = &limits
	}
	v := c.view(req, "Task "+id)
	v.Nav, v.Data = "tasks", tv
	c.render(w, http.StatusOK, "task", v)
	return nil
}

// taskID reads the {id} path value: a task ID by the rule the queue and
// the API hold task IDs to (model.CheckTaskID), refused naming id.
func taskID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if err := model.CheckTaskID(id); err != nil {
		var v *model.ValidationError
		if errors.As(err, &v) {
			return "", &model.ValidationError{Field: "id", Problem: v.Problem}
		}
		return "", err
	}
	return id, nil
}

// done records a one-time message and sends the browser to the task.
func (c *Console) done(w http.ResponseWriter, r *http.Request, req *request, id, msg string) error {
	c.sessions.setFlash(req.ses, msg)
	http.Redirect(w, r, "/ui/tasks/"+id, http.StatusSeeOther)
	return nil
}

func (c *Console) cancel(w http.ResponseWriter, r *http.Request, req *request) error {
	id, err := taskID(r)
	if err != nil {
		return err
	}
	t, err := c.backend.Cancel(r.Context(), req.p, id)
	if err != nil {
		return err
	}
	msg := "Cancelled."
	if t.State == model.Running {
		msg = "Cancellation requested: the worker stops before its next step."
	}
	return c.done(w, r, req, id, msg)
}

// formInt reads a required integer form field.
func formInt(r *http.Request, field string) (int64, error) {
	s := strings.TrimSpace(r.PostForm.Get(field))
	if s == "" {
		return 0, &model.ValidationError{Field: field, Problem: "required"}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, &model.ValidationError{Field: field, Problem: "not a whole number"}
	}
	return n, nil
}

// shownVersion reads the version the page showed when its button was
// drawn.
func shownVersion(r *http.Request) (int64, error) {
	v, err := formInt(r, "version")
	if err == nil && v < 1 {
		err = &model.ValidationError{Field: "version", Problem: "must be positive"}
	}
	return v, err
}

// stale answers a decision refused because the task moved on since its
// page was drawn: the refusal is kept for the task's page and the browser
// is sent there (redirect after POST), so that the page it lands on is
// the task as it is now, and reloading it posts nothing again.
func (c *Console) stale(w http.ResponseWriter, r *http.Request, req *request, id string, shown int64, err error) error {
	c.sessions.setRefusal(req.ses, fmt.Sprintf("Refused: task %s is no longer at the version this page showed (%d): it changed since the page was drawn; look at it again before deciding (%s).",
		id, shown, oneLine(err.Error())))
	http.Redirect(w, r, "/ui/tasks/"+id, http.StatusSeeOther)
	return nil
}

func (c *Console) approve(w http.ResponseWriter, r *http.Request, req *request) error {
	return c.decide(w, r, req, c.backend.Approve, "Approved version %d: the task is queued to resume.")
}

// reject names the version its button showed; the queue refuses it, and
// writes nothing, when the task paused again since or is no longer waiting.
func (c *Console) reject(w http.ResponseWriter, r *http.Request, req *request) error {
	return c.decide(w, r, req, c.backend.Reject, "Rejected version %d: the task is cancelled.")
}

// decide runs an approval decision (the backend's Approve or Reject) on
// the version the page showed: a task that moved on since is stale, and
// done's message is told the version decided.
func (c *Console) decide(w http.ResponseWriter, r *http.Request, req *request,
	act func(ctx context.Context, p Principal, id string, version int64) error, message string) error {
	id, err := taskID(r)
	if err != nil {
		return err
	}
	version, err := shownVersion(r)
	if err != nil {
		return err
	}
	if err := act(r.Context(), req.p, id, version); err != nil {
		if errors.Is(err, model.ErrVersionMismatch) || errors.Is(err, model.ErrInvalidTransition) {
			return c.stale(w, r, req, id, version, err)
		}
		return err
	}
	return c.done(w, r, req, id, fmt.Sprintf(message, version))
}

func (c *Console) requeue(w http.ResponseWriter, r *http.Request, req *request) error {
	id, err := taskID(r)
	if err != nil {
		return err
	}
	cost, err := formInt(r, "grant_cost")
	if err != nil {
		return err
	}
	steps, err := formInt(r, "grant_steps")
	if err != nil {
		return err
	}
	if err := c.backend.Requeue(r.Context(), req.p, id, model.Grant{Cost: cost, Steps: int(steps)}); err != nil {
		return err
	}
	return c.done(w, r, req, id, fmt.Sprintf("Requeued with a grant of %d cost and %d steps.", cost, steps))
}

func (c *Console) resolve(w http.ResponseWriter, r *http.Request, req *request) error {
	id, err := taskID(r)
	if err != nil {
		return err
	}
	choice := r.PostForm.Get("as")
	if choice == "" {
		return &model.ValidationError{Field: "as", Problem: "choose the state to resolve the task as (completed, failed or cancelled); nothing was changed"}
	}
	as, err := model.ParseState(choice)
	if err != nil {
		return &model.ValidationError{Field: "as", Problem: err.Error()}
	}
	if err := c.backend.Resolve(r.Context(), req.p, id, as); err != nil {
		return err
	}
	return c.done(w, r, req, id, "Resolved as "+string(as)+".")
}

// settle records the outcome of one of the task's effects whose receipt
// is missing, as the provider reported it to the operator.
func (c *Console) settle(w http.ResponseWriter, r *http.Request, req *request) error {
	id, err := taskID(r)
	if err != nil {
		return err
	}
	op := r.PostForm.Get("op")
	if task, _, _ := strings.Cut(op, ".s"); task != id {
		return &model.ValidationError{Field: "op", Problem: "not an operation of this task"}
	}
	var applied bool
	switch r.PostForm.Get("applied") {
	case "true":
		applied = true
	case "false":
	default:
		return &model.ValidationError{Field: "applied", Problem: "required: true or false, as the provider reports"}
	}
	if err := c.backend.SettleEffect(r.Context(), req.p, op, applied); err != nil {
		return err
	}
	what := "not applied"
	if applied {
		what = "applied"
	}
	return c.done(w, r, req, id, fmt.Sprintf("Recorded %s as %s by the provider.", op, what))
}

func (c *Console) approvalsPage(w http.ResponseWriter, r *http.Request, req *request) error {
	page, err := c.backend.List(r.Context(), req.p, TaskFilter{State: model.WaitingForApproval, After: r.URL.Query().Get("after"), Limit: c.pageSize})
	if err != nil {
		return err
	}
	tv := tasksView{Tasks: page.Tasks, First: r.URL.Query().Get("after") == ""}
	if page.Next != "" {
		tv.Next = "/ui/approvals?after=" + page.Next
	}
	v := c.view(req, "Waiting for approval")
	v.Nav, v.Data = "approvals", tv
	c.render(w, http.StatusOK, "approvals", v)
	return nil
}

// inspectView is the operator's inspect page.
type inspectView struct {
	Items  []Inspection
	Limits model.Limits
}

func (c *Console) inspectPage(w http.ResponseWriter, r *http.Request, req *request) error {
	items, err := c.backend.Inspect(r.Context(), req.p)
	if err != nil {
		return err
	}
	limits, _, err := c.backend.Limits(r.Context(), req.p)
	if err != nil {
		return err
	}
	v := c.view(req, "Inspect")
	v.Nav, v.Data = "inspect", inspectView{Items: items, Limits: limits}
	c.render(w, http.StatusOK, "inspect", v)
	return nil
}

// liveView is the live page: depth, the oldest queued task's age, the
// outcome counters over every kind and by kind, and the latest failures.
type liveView struct {
	Depth    []depthRow
	Oldest   string
	Outcomes []outcomeRow
	Failures []model.Task
	// Charts are the last hour's depth by state and throughput, from the
	// console's samples; Samples how many there are, SampleEvery how often.
	Charts      []template.HTML
	Samples     int
	SampleEvery time.Duration
}

type depthRow struct {
	State model.State
	Count int64
}

// outcomeRow is one row of the live page's outcome counters: the totals
// (Kind empty, All set), or one kind's counts.
type outcomeRow struct {
	Kind   string
	All    bool
	Counts model.Counts
}

// outcomeRows are the totals of m, then its counts by kind folded over
// kinds (each by name, zeros included, sorted), then every other kind's
// as wire.KindOther.
func outcomeRows(m model.Metrics, kinds []string) []outcomeRow {
	rows := []outcomeRow{{All: true, Counts: m.Totals()}}
	byKind := wire.FoldKinds(m.ByKind, kinds)
	for _, kind := range wire.MetricKinds(kinds) {
		rows = append(rows, outcomeRow{Kind: kind, Counts: byKind[kind]})
	}
	return append(rows, outcomeRow{Kind: wire.KindOther, Counts: byKind[wire.KindOther]})
}

func (c *Console) livePage(w http.ResponseWriter, r *http.Request, req *request) error {
	m, err := c.backend.Metrics(r.Context(), req.p)
	if err != nil {
		return err
	}
	failures, err := c.backend.RecentFailures(r.Context(), req.p, recentFailuresMax)
	if err != nil {
		return err
	}
	lv := liveView{Oldest: roundDuration(m.OldestQueuedAge).String(), Outcomes: outcomeRows(m, c.backend.MetricKinds()),
		Failures: failures, SampleEvery: c.sampleEvery}
	for _, s := range model.States() {
		lv.Depth = append(lv.Depth, depthRow{State: s, Count: m.Depth[s]})
	}
	now := c.clock.Now()
	samples := c.history.since(now.Add(-historyWindow))
	lv.Samples = len(samples)
	if lv.Charts, err = historyCharts(samples, now); err != nil {
		return err
	}
	v := c.view(req, "Live")
	v.Nav, v.Data = "live", lv
	c.render(w, http.StatusOK, "live", v)
	return nil
}

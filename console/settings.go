package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/model"
)

// The operator's settings: the limits and the schedules, shown and
// changed through the same Backend calls (the API's cores) as the API's
// PUT /v1/limits, PUT /v1/limits/users/{user}, POST /v1/schedules and
// DELETE /v1/schedules/{id}. A refused change draws its page again with
// what was entered, the refusal, and the field it names marked.

// field is one input of a settings form.
type field struct {
	Name, Label, Hint, Value string
	Min, Max                 int64
	Invalid                  bool
}

// limitFields are the queue-wide limits' inputs, in the order the page
// shows them, with the ranges model.LimitRanges sets.
var limitFields = []struct {
	name, label, hint string
	get               func(l *model.Limits) int64
	set               func(l *model.Limits, n int64)
}{
	{"depth_max", "Active tasks, all users", "0: unlimited",
		func(l *model.Limits) int64 { return int64(l.DepthMax) }, func(l *model.Limits, n int64) { l.DepthMax = int(n) }},
	{"user_depth_max", "Active tasks per user", "0: unlimited",
		func(l *model.Limits) int64 { return int64(l.UserDepthMax) }, func(l *model.Limits, n int64) { l.UserDepthMax = int(n) }},
	{"user_running_max", "Running tasks per user", "0: unlimited",
		func(l *model.Limits) int64 { return int64(l.UserRunningMax) }, func(l *model.Limits, n int64) { l.UserRunningMax = int(n) }},
	{"attempts_max", "Attempts before review", "",
		func(l *model.Limits) int64 { return int64(l.AttemptsMax) }, func(l *model.Limits, n int64) { l.AttemptsMax = int(n) }},
	{"grant_cost_max", "Largest requeue grant: cost", "",
		func(l *model.Limits) int64 { return l.GrantCostMax }, func(l *model.Limits, n int64) { l.GrantCostMax = n }},
	{"grant_steps_max", "Largest requeue grant: steps", "",
		func(l *model.Limits) int64 { return int64(l.GrantStepsMax) }, func(l *model.Limits, n int64) { l.GrantStepsMax = int(n) }},
	{"claim_batch_max", "Largest claim batch", "",
		func(l *model.Limits) int64 { return int64(l.ClaimBatchMax) }, func(l *model.Limits, n int64) { l.ClaimBatchMax = int(n) }},
}

// limitsView is the limits page: the limits in force, the per-user
// overrides, and the two forms that change them.
type limitsView struct {
	Limits model.Limits
	Users  []model.UserLimit
	// QueueWide is whether the token may change the queue-wide limits
	// (only a token for every user may).
	QueueWide  bool
	LimitsForm []field
	UserForm   userLimitForm
}

// userLimitForm sets one user's override; an empty value inherits.
type userLimitForm struct {
	User    string
	Choices []string // the users the token names, when it does not name all
	Fields  []field
	Invalid bool // the user field was refused
}

func (c *Console) limitsPage(w http.ResponseWriter, r *http.Request, req *request) error {
	lv, err := c.limitsView(r, req)
	if err != nil {
		return err
	}
	v := c.view(req, "Limits")
	v.Nav, v.Data = "limits", lv
	c.render(w, http.StatusOK, "limits", v)
	return nil
}

// limitsView reads the limits and fills both forms with them.
func (c *Console) limitsView(r *http.Request, req *request) (limitsView, error) {
	limits, users, err := c.backend.Limits(r.Context(), req.p)
	if err != nil {
		return limitsView{}, err
	}
	lv := limitsView{Limits: limits, Users: users, QueueWide: req.p.AllUsers()}
	for _, f := range limitFields {
		rg := model.LimitRanges[f.name]
		lv.LimitsForm = append(lv.LimitsForm, field{Name: f.name, Label: f.label, Hint: f.hint,
			Value: strconv.FormatInt(f.get(&limits), 10), Min: rg.Min, Max: rg.Max})
	}
	lv.UserForm = newUserLimitForm(req.p, url.Values{})
	return lv, nil
}

func newUserLimitForm(p Principal, in url.Values) userLimitForm {
	f := userLimitForm{User: strings.TrimSpace(in.Get("user"))}
	if !p.AllUsers() {
		f.Choices = p.Users
		if f.User == "" && len(f.Choices) > 0 {
			f.User = f.Choices[0]
		}
	}
	for _, name := range []string{"running_max", "depth_max"} {
		rg := model.UserLimitRanges[name]
		label := map[string]string{"running_max": "Running at most", "depth_max": "Active at most"}[name]
		f.Fields = append(f.Fields, field{Name: name, Label: label, Hint: "empty: the default; 0: unlimited",
			Value: strings.TrimSpace(in.Get(name)), Min: rg.Min, Max: rg.Max})
	}
	return f
}

// renderLimits draws the limits page again after a refused change: the
// forms keep what was entered (edit changes the view read afresh), and
// the refused field of the form posted (userForm: the user's) is marked.
func (c *Console) renderLimits(w http.ResponseWriter, r *http.Request, req *request, refused error, userForm bool, edit func(*limitsView)) error {
	lv, err := c.limitsView(r, req)
	if err != nil {
		return err
	}
	edit(&lv)
	bad := invalidField(refused)
	if userForm {
		for i := range lv.UserForm.Fields {
			lv.UserForm.Fields[i].Invalid = lv.UserForm.Fields[i].Name == bad
		}
		lv.UserForm.Invalid = bad == "user"
	} else {
		for i := range lv.LimitsForm {
			lv.LimitsForm[i].Invalid = lv.LimitsForm[i].Name == bad
		}
	}
	v := c.view(req, "Limits")
	v.Nav, v.Data = "limits", lv
	v.Error = c.refusal(refused)
	c.render(w, statusOf(refused), "limits", v)
	return nil
}

// setLimits replaces the queue-wide limits from the form.
func (c *Console) setLimits(w http.ResponseWriter, r *http.Request, req *request) error {
	limits, err := parseLimits(r.PostForm)
	if err == nil {
		err = c.backend.SetLimits(r.Context(), req.p, limits)
	}
	if err != nil {
		return c.renderLimits(w, r, req, err, false, func(lv *limitsView) {
			for i := range lv.LimitsForm {
				lv.LimitsForm[i].Value = strings.TrimSpace(r.PostForm.Get(lv.LimitsForm[i].Name))
			}
		})
	}
	c.sessions.setFlash(req.ses, "Queue-wide limits saved.")
	http.Redirect(w, r, "/ui/limits", http.StatusSeeOther)
	return nil
}

// parseLimits reads every queue-wide limit from the form; each must be a
// whole number in its range (the queue checks the ranges again).
func parseLimits(form url.Values) (model.Limits, error) {
	var l model.Limits
	for _, f := range limitFields {
		n, err := parseInt64(f.name, form.Get(f.name))
		if err != nil {
			return l, err
		}
		f.set(&l, n)
	}
	return l, l.Validate()
}

// setUserLimit sets one user's override from the form.
func (c *Console) setUserLimit(w http.ResponseWriter, r *http.Request, req *request) error {
	u, err := parseUserLimit(r.PostForm)
	if err == nil {
		err = c.backend.SetUserLimit(r.Context(), req.p, u)
	}
	if err != nil {
		return c.renderLimits(w, r, req, err, true, func(lv *limitsView) { lv.UserForm = newUserLimitForm(req.p, r.PostForm) })
	}
	c.sessions.setFlash(req.ses, fmt.Sprintf("Limits of user %s saved.", u.User))
	http.Redirect(w, r, "/ui/limits", http.StatusSeeOther)
	return nil
}

func parseUserLimit(form url.Values) (model.UserLimit, error) {
	u := model.UserLimit{User: strings.TrimSpace(form.Get("user")), RunningMax: model.Inherit, DepthMax: model.Inherit}
	if err := model.CheckName("user", u.User); err != nil {
		return u, err
	}
	for _, in := range []struct {
		name string
		dst  *int
	}{{"running_max", &u.RunningMax}, {"depth_max", &u.DepthMax}} {
		if strings.TrimSpace(form.Get(in.name)) == "" {
			continue
		}
		n, err := parseInt64(in.name, form.Get(in.name))
		if err != nil {
			return u, err
		}
		if rg := model.UserLimitRanges[in.name]; !rg.Contains(n) {
			return u, &model.ValidationError{Field: in.name, Problem: fmt.Sprintf("must be between %d and %d, got %d", rg.Min, rg.Max, n)}
		}
		*in.dst = int(n)
	}
	return u, u.Validate()
}

// schedulesView is the schedules page: the schedules and the form that
// adds one.
type schedulesView struct {
	Schedules []model.Schedule
	Form      scheduleForm
	Invalid   string // the refused field's name
	Choices   []string
}

type scheduleForm struct {
	User, Payload, CostBudget, StepsMax, Priority, Origin, Period string
}

func (c *Console) newScheduleForm(p Principal) scheduleForm {
	f := scheduleForm{Payload: `{"steps": [{"cost": 1}]}`, CostBudget: "10", StepsMax: "5", Priority: "0", Period: "1h",
		Origin: c.clock.Now().UTC().Truncate(time.Second).Format(time.RFC3339)}
	if !p.AllUsers() && len(p.Users) > 0 {
		f.User = p.Users[0]
	}
	return f
}

func (c *Console) schedulesPage(w http.ResponseWriter, r *http.Request, req *request) error {
	return c.renderSchedules(w, r, req, c.newScheduleForm(req.p), nil)
}

// renderSchedules draws the schedules page with form; after a refusal,
// with the refusal and its field marked.
func (c *Console) renderSchedules(w http.ResponseWriter, r *http.Request, req *request, form scheduleForm, refused error) error {
	schedules, err := c.backend.Schedules(r.Context(), req.p)
	if err != nil {
		return err
	}
	sv := schedulesView{Schedules: schedules, Form: form}
	if !req.p.AllUsers() {
		sv.Choices = req.p.Users
	}
	v := c.view(req, "Schedules")
	status := http.StatusOK
	if refused != nil {
		sv.Invalid, v.Error, status = invalidField(refused), c.refusal(refused), statusOf(refused)
	}
	v.Nav, v.Data = "schedules", sv
	c.render(w, status, "schedules", v)
	return nil
}

// addSchedule adds the schedule the form describes.
func (c *Console) addSchedule(w http.ResponseWriter, r *http.Request, req *request) error {
	in := r.PostForm
	form := scheduleForm{User: strings.TrimSpace(in.Get("user")), Payload: in.Get("payload"), CostBudget: in.Get("cost_budget"),
		StepsMax: in.Get("steps_max"), Priority: in.Get("priority"), Origin: in.Get("origin"), Period: in.Get("period")}
	spec, err := form.spec()
	var sch model.Schedule
	if err == nil {
		sch, err = c.backend.AddSchedule(r.Context(), req.p, spec)
	}
	if err != nil {
		return c.renderSchedules(w, r, req, form, err)
	}
	c.sessions.setFlash(req.ses, fmt.Sprintf("Schedule %s added: a task for %s every %s from %s.", sch.ID, sch.User,
		roundDuration(sch.Period), sch.Origin.UTC().Format(time.RFC3339)))
	http.Redirect(w, r, "/ui/schedules", http.StatusSeeOther)
	return nil
}

// spec reads the form; the queue checks the task fields as a submit's.
func (f scheduleForm) spec() (model.ScheduleSpec, error) {
	s := model.ScheduleSpec{User: f.User, Payload: f.Payload}
	if err := repeatedKey("payload", []byte(f.Payload)); err != nil {
		return s, err
	}
	var err error
	if s.CostBudget, err = parseInt64("cost_budget", f.CostBudget); err != nil {
		return s, err
	}
	steps, err := parseInt64("steps_max", f.StepsMax)
	if err != nil {
		return s, err
	}
	priority, err := parseInt64("priority", f.Priority)
	if err != nil {
		return s, err
	}
	if steps < 0 || steps > model.StepsMaxLimit {
		return s, &model.ValidationError{Field: "steps_max", Problem: fmt.Sprintf("must be between 1 and %d", model.StepsMaxLimit)}
	}
	if priority < -model.PriorityMax || priority > model.PriorityMax {
		return s, &model.ValidationError{Field: "priority", Problem: fmt.Sprintf("must be between %d and %d", -model.PriorityMax, model.PriorityMax)}
	}
	s.StepsMax, s.Priority = int(steps), int(priority)
	if strings.TrimSpace(f.Origin) == "" {
		return s, &model.ValidationError{Field: "origin", Problem: "required: the first run's time"}
	}
	if s.Origin, err = parseTime("origin", f.Origin); err != nil {
		return s, err
	}
	period := strings.TrimSpace(f.Period)
	if s.Period, err = time.ParseDuration(period); err != nil || period == "" {
		return s, &model.ValidationError{Field: "period", Problem: "not a duration such as 15m or 24h"}
	}
	return s, nil
}

// removeSchedule removes the schedule the row's button names.
func (c *Console) removeSchedule(w http.ResponseWriter, r *http.Request, req *request) error {
	id := r.PathValue("id")
	if err := c.backend.RemoveSchedule(r.Context(), req.p, id); err != nil {
		return c.renderSchedules(w, r, req, c.newScheduleForm(req.p), err)
	}
	c.sessions.setFlash(req.ses, fmt.Sprintf("Schedule %s removed: it makes no more tasks (those it made stay).", id))
	http.Redirect(w, r, "/ui/schedules", http.StatusSeeOther)
	return nil
}

// invalidField names the form field a refusal is about ("payload" for
// "payload.steps[0].cost"), "" if none.
func invalidField(err error) string {
	var v *model.ValidationError
	if !errors.As(err, &v) {
		return ""
	}
	name, _, _ := strings.Cut(v.Field, ".")
	name, _, _ = strings.Cut(name, "[")
	return name
}

// refusal words a refused change for its page; a storage failure is
// logged and shown without its detail.
func (c *Console) refusal(err error) string {
	if statusOf(err) == http.StatusServiceUnavailable {
		c.log.Warn("console: change failed in storage", "error", oneLine(err.Error()))
		return "The queue's storage is unavailable; nothing is known to have changed. Retry later."
	}
	if errors.Is(err, model.ErrNotFound) {
		return "Refused: there is no such schedule, or it is not one your token may see."
	}
	return "Refused: " + oneLine(err.Error())
}

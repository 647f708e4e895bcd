package console

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/jsonkeys"
	"github.com/leasehold/leasehold/model"
)

// submitView is the submit page: the form's last values (kept when a
// submit is refused) and a bulk submit's results.
type submitView struct {
	Form    submitForm
	Bulk    string
	Results []bulkResult
	Users   []string // the users the token names, when it does not name all
}

type submitForm struct {
	User, Key, Kind, Payload, CostBudget, StepsMax, Priority, RunAt, Deadline string
}

type bulkResult struct {
	Line   int
	TaskID string
	Replay bool
}

func (c *Console) submitView(req *request) submitView {
	sv := submitView{Form: submitForm{CostBudget: "100", StepsMax: "10", Priority: "0", Payload: `{"steps": [{"cost": 1}]}`}}
	if !req.p.AllUsers() {
		sv.Users = req.p.Users
		if len(sv.Users) > 0 {
			sv.Form.User = sv.Users[0]
		}
	}
	return sv
}

func (c *Console) submitPage(w http.ResponseWriter, _ *http.Request, req *request) error {
	v := c.view(req, "Submit")
	v.Nav, v.Data = "submit", c.submitView(req)
	c.render(w, http.StatusOK, "submit", v)
	return nil
}

// renderSubmit draws the submit page again with the refusal and what was
// entered.
func (c *Console) renderSubmit(w http.ResponseWriter, req *request, sv submitView, err error) {
	v := c.view(req, "Submit")
	v.Nav, v.Data = "submit", sv
	status := statusOf(err)
	v.Error = "Refused: " + oneLine(err.Error())
	if status == http.StatusServiceUnavailable {
		c.log.Warn("console: submit failed in storage", "error", oneLine(err.Error()))
		v.Error = "The queue's storage is unavailable; retry later."
	}
	c.render(w, status, "submit", v)
}

func (c *Console) submit(w http.ResponseWriter, r *http.Request, req *request) error {
	f := r.PostForm
	sv := c.submitView(req)
	sv.Form = submitForm{User: f.Get("user"), Key: f.Get("key"), Kind: f.Get("kind"), Payload: f.Get("payload"), CostBudget: f.Get("cost_budget"),
		StepsMax: f.Get("steps_max"), Priority: f.Get("priority"), RunAt: f.Get("run_at"), Deadline: f.Get("deadline")}
	sr, err := sv.Form.request()
	if err == nil {
		var res model.SubmitResult
		if res, err = c.backend.Submit(r.Context(), req.p, sr); err == nil {
			msg := "Submitted."
			if res.Replay {
				msg = "That key was used before with the same request: this is the task it made."
			}
			return c.done(w, r, req, res.TaskID, msg)
		}
	}
	c.renderSubmit(w, req, sv, err)
	return nil
}

// request turns the form into a submit request; the Backend validates it
// further, as the API does.
func (f submitForm) request() (model.SubmitRequest, error) {
	req := model.SubmitRequest{User: strings.TrimSpace(f.User), Key: strings.TrimSpace(f.Key), Kind: strings.TrimSpace(f.Kind),
		Payload: f.Payload}
	if err := repeatedKey("payload", []byte(f.Payload)); err != nil {
		return req, err
	}
	var err error
	if req.CostBudget, err = parseInt64("cost_budget", f.CostBudget); err != nil {
		return req, err
	}
	steps, err := parseInt64("steps_max", f.StepsMax)
	if err != nil {
		return req, err
	}
	priority, err := parseInt64("priority", f.Priority)
	if err != nil {
		return req, err
	}
	if steps > model.StepsMaxLimit || steps < 0 {
		return req, &model.ValidationError{Field: "steps_max", Problem: fmt.Sprintf("must be between 1 and %d", model.StepsMaxLimit)}
	}
	if priority > model.PriorityMax || priority < -model.PriorityMax {
		return req, &model.ValidationError{Field: "priority", Problem: fmt.Sprintf("must be between %d and %d", -model.PriorityMax, model.PriorityMax)}
	}
	req.StepsMax, req.Priority = int(steps), int(priority)
	if req.RunAt, err = parseTime("run_at", f.RunAt); err != nil {
		return req, err
	}
	if req.Deadline, err = parseTime("deadline", f.Deadline); err != nil {
		return req, err
	}
	return req, nil
}

func parseInt64(field, s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, &model.ValidationError{Field: field, Problem: "required"}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, &model.ValidationError{Field: field, Problem: "not a whole number"}
	}
	return n, nil
}

// parseTime reads an optional RFC 3339 time.
func parseTime(field, s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, &model.ValidationError{Field: field, Problem: "not an RFC 3339 time (like 2026-12-02T09:30:00Z)"}
	}
	return t, model.CheckTimeRange(field, t)
}

// bulkLine is one line of a bulk submit: the API's submit body, as
// `leasehold submit --batch` reads it.
type bulkLine struct {
	User       string          `json:"user"`
	Key        string          `json:"key"`
	Kind       string          `json:"kind"`
	Payload    json.RawMessage `json:"payload"`
	CostBudget int64           `json:"cost_budget"`
	StepsMax   int             `json:"steps_max"`
	Priority   int             `json:"priority"`
	RunAt      string          `json:"run_at"`
	Deadline   string          `json:"deadline"`
}

// parseBulk reads JSON lines (blank lines skipped) into requests and
// their line numbers, at most SubmitBatchMax.
func parseBulk(text string) ([]model.SubmitRequest, []int, error) {
	scanner := bufio.NewScanner(strings.NewReader(text))
	scanner.Buffer(make([]byte, 0, 64<<10), formBytesMax)
	var reqs []model.SubmitRequest
	var lines []int
	for n := 1; scanner.Scan(); n++ {
		line := bytes.TrimSpace(scanner.Bytes())
		if len(line) == 0 {
			continue
		}
		if len(reqs) == model.SubmitBatchMax {
			return nil, nil, &model.ValidationError{Field: "batch", Problem: fmt.Sprintf("more than %d requests, the limit of one batch", model.SubmitBatchMax)}
		}
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		var b bulkLine
		if err := dec.Decode(&b); err != nil || dec.More() {
			return nil, nil, &model.ValidationError{Field: "batch", Problem: fmt.Sprintf("line %d is not one JSON object of submit fields", n)}
		}
		if err := repeatedKey("batch", line); err != nil {
			return nil, nil, fmt.Errorf("line %d: %w", n, err)
		}
		req := model.SubmitRequest{User: b.User, Key: b.Key, Kind: b.Kind, Payload: string(b.Payload), CostBudget: b.CostBudget, StepsMax: b.StepsMax, Priority: b.Priority}
		var err error
		if req.RunAt, err = parseTime("run_at", b.RunAt); err == nil {
			req.Deadline, err = parseTime("deadline", b.Deadline)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("line %d: %w", n, err)
		}
		reqs, lines = append(reqs, req), append(lines, n)
	}
	if err := scanner.Err(); err != nil {
		return nil, nil, &model.ValidationError{Field: "batch", Problem: "a line is too long"}
	}
	if len(reqs) == 0 {
		return nil, nil, &model.ValidationError{Field: "batch", Problem: "no requests: one JSON object a line"}
	}
	return reqs, lines, nil
}

func (c *Console) submitBulk(w http.ResponseWriter, r *http.Request, req *request) error {
	sv := c.submitView(req)
	sv.Bulk = r.PostForm.Get("batch")
	reqs, lines, err := parseBulk(sv.Bulk)
	if err == nil {
		err = forUsers(req.p, reqs, lines)
	}
	if err == nil {
		var results []model.SubmitResult
		if results, err = c.backend.SubmitMany(r.Context(), req.p, reqs); err == nil {
			for i, res := range results {
				sv.Results = append(sv.Results, bulkResult{Line: lines[i], TaskID: res.TaskID, Replay: res.Replay})
			}
			sv.Bulk = ""
			v := c.view(req, "Submit")
			v.Nav, v.Data = "submit", sv
			v.Flash = fmt.Sprintf("Submitted %d requests in one transaction.", len(results))
			c.render(w, http.StatusOK, "submit", v)
			return nil
		}
		var item *model.BatchItemError
		if errors.As(err, &item) && item.Index >= 0 && item.Index < len(lines) {
			err = fmt.Errorf("line %d: %w (nothing in the batch was submitted)", lines[item.Index], item.Err)
		}
	}
	c.renderSubmit(w, req, sv, err)
	return nil
}

// forUsers names the first line whose user the principal does not act
// for. It only words the refusal by line: the Backend refuses such a
// batch itself.
func forUsers(p Principal, reqs []model.SubmitRequest, lines []int) error {
	for i, r := range reqs {
		if model.CheckName("user", r.User) == nil && !p.ActsFor(r.User) {
			return fmt.Errorf("line %d: token %s does not act for user %s (nothing in the batch was submitted): %w", lines[i], p.Name, r.User, ErrForbidden)
		}
	}
	return nil
}

// repeatedKey refuses a JSON document entered in field with a key
// repeated in one object (jsonkeys), naming the key's path and never a
// value. A malformed document passes: its refusal is the queue's.
func repeatedKey(field string, doc []byte) error {
	var dup *jsonkeys.DuplicateError
	if errors.As(jsonkeys.Check(doc), &dup) {
		return &model.ValidationError{Field: field, Problem: dup.Error()}
	}
	return nil
}

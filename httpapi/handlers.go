package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/wire"
)

// The routes' HTTP side: each reads its request, calls its core (core.go)
// and writes the answer.

// writeTask writes the task id the principal may see, with the sequence
// number of its latest event. The number is read first: the record is at
// least as new as it, so a waiter that waits past it never misses the
// change that follows (at worst it wakes for one it already has).
func (s *Server) writeTask(w http.ResponseWriter, r *http.Request, p Principal, id string) error {
	if err := model.CheckTaskID(id); err != nil {
		return pathError("id", err)
	}
	seq, err := s.q.LastEventSeq(r.Context(), id)
	if err != nil {
		return err
	}
	t, err := s.Task(r.Context(), p, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, taskRecord(t, seq))
	return nil
}

// taskRecord is t's record, with its payload (for a principal that may
// read the task) and the sequence number of its latest event.
func taskRecord(t model.Task, lastEventSeq int64) wire.Task {
	out := wire.TaskOf(t)
	out.Payload = json.RawMessage(t.Payload)
	out.LastEventSeq = lastEventSeq
	return out
}

// taskLocation is the URL path of a task.
func taskLocation(id string) string { return "/v1/tasks/" + url.PathEscape(id) }

func (s *Server) submit(w http.ResponseWriter, r *http.Request, p Principal) error {
	var b wire.SubmitRequest
	if err := decode(r, &b, submitRanges); err != nil {
		return err
	}
	req, err := b.Model()
	if err != nil {
		return err
	}
	res, err := s.Submit(r.Context(), p, req)
	if err != nil {
		return err
	}
	status := http.StatusCreated
	if res.Replay {
		status = http.StatusOK
	}
	w.Header().Set("Location", taskLocation(res.TaskID))
	writeJSON(w, status, wire.SubmitResultOf(res))
	return nil
}

// submitBatch is POST /v1/tasks/batch: {"tasks": [submit, ...]}, one
// transaction. An item's refusal names its index (tasks[3].cost_budget).
func (s *Server) submitBatch(w http.ResponseWriter, r *http.Request, p Principal) error {
	var b struct {
		Tasks []json.RawMessage `json:"tasks"`
	}
	if err := decode(r, &b, noIntegerFields); err != nil {
		return err
	}
	if b.Tasks == nil {
		return &model.ValidationError{Field: "tasks", Problem: "required: an array of submits"}
	}
	if err := model.CheckBatchSize(len(b.Tasks)); err != nil {
		return &model.ValidationError{Field: "tasks", Problem: fmt.Sprintf("%d items: want 1 to %d", len(b.Tasks), model.SubmitBatchMax)}
	}
	reqs := make([]model.SubmitRequest, len(b.Tasks))
	for i, raw := range b.Tasks {
		var item wire.SubmitRequest
		if err := decodeBytes(raw, &item, submitRanges); err != nil {
			return &model.BatchItemError{Index: i, Err: err}
		}
		req, err := item.Model()
		if err != nil {
			return &model.BatchItemError{Index: i, Err: err}
		}
		reqs[i] = req
	}
	results, err := s.SubmitMany(r.Context(), p, reqs)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.BatchResult{Results: wire.All(results, wire.SubmitResultOf)})
	return nil
}

// getTask is GET /v1/tasks/{id}, or with ?wait=D&after_seq=S a long-poll.
func (s *Server) getTask(w http.ResponseWriter, r *http.Request, p Principal) error {
	query, err := queryOf(r, "wait", "after_seq")
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	if query.Has("wait") || query.Has("after_seq") {
		return s.waitTask(w, r, p, id, query)
	}
	return s.writeTask(w, r, p, id)
}

func (s *Server) waitTask(w http.ResponseWriter, r *http.Request, p Principal, id string, query url.Values) error {
	if !query.Has("wait") || !query.Has("after_seq") {
		return &model.ValidationError{Field: "wait", Problem: "wait and after_seq go together (wait=30s&after_seq=SEQ)"}
	}
	wait, err := time.ParseDuration(query.Get("wait"))
	if err != nil {
		return &model.ValidationError{Field: "wait", Problem: fmt.Sprintf("%s is not a duration such as 30s", model.Quote(query.Get("wait"), 32))}
	}
	after, err := strconv.ParseInt(query.Get("after_seq"), 10, 64)
	if err != nil {
		return &model.ValidationError{Field: "after_seq", Problem: fmt.Sprintf("%s is not a whole number", model.Quote(query.Get("after_seq"), 32))}
	}
	liftWriteDeadline(w)
	t, seq, err := s.WaitTask(r.Context(), p, id, after, wait)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, taskRecord(t, seq))
	return nil
}

// The orders GET /v1/tasks lists in (its order parameter).
const (
	orderOldest = "oldest" // in submission order: the default
	orderNewest = "newest" // the newest first
)

// listTasks is GET /v1/tasks.
func (s *Server) listTasks(w http.ResponseWriter, r *http.Request, p Principal) error {
	query, err := queryOf(r, "state", "user", "created_from", "created_until", "schedule_id", "kind", "limit", "after", "order")
	if err != nil {
		return err
	}
	f := ListFilter{State: model.State(query.Get("state")), User: query.Get("user"),
		ScheduleID: query.Get("schedule_id"), Kind: query.Get("kind"), After: query.Get("after"), Limit: model.ListLimitDefault}
	if query.Has("limit") {
		n, err := strconv.Atoi(query.Get("limit"))
		if err != nil || n < 1 || n > model.ListLimitMax {
			return &model.ValidationError{Field: "limit", Problem: fmt.Sprintf("must be a whole number from 1 to %d, got %s", model.ListLimitMax, model.Quote(query.Get("limit"), 32))}
		}
		f.Limit = n
	}
	switch order := query.Get("order"); order {
	case "", orderOldest:
	case orderNewest:
		f.Newest = true
	default:
		return &model.ValidationError{Field: "order", Problem: fmt.Sprintf("must be %s or %s, got %s", orderOldest, orderNewest, model.Quote(order, 32))}
	}
	if f.CreatedFrom, err = wire.ParseTime("created_from", query.Get("created_from")); err != nil {
		return err
	}
	if f.CreatedUntil, err = wire.ParseTime("created_until", query.Get("created_until")); err != nil {
		return err
	}
	if f.ScheduleID != "" {
		if err := model.CheckName("schedule_id", f.ScheduleID); err != nil {
			return err
		}
	}
	page, err := s.List(r.Context(), p, f)
	if err != nil {
		return err
	}
	// Listed tasks carry no last_event_seq: a waiter takes it from GET
	// /v1/tasks/{id}, which reads it before the record.
	writeJSON(w, http.StatusOK, wire.TaskPage{Tasks: wire.All(page.Tasks, wire.TaskOf), Next: page.Next})
	return nil
}

// queryOf returns the request's query, refusing a parameter not in known
// or given twice.
func queryOf(r *http.Request, known ...string) (url.Values, error) {
	query, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, &model.ValidationError{Field: "query", Problem: "not a valid query string"}
	}
	for name, values := range query {
		if !slices.Contains(known, name) {
			return nil, &model.ValidationError{Field: "query", Problem: "unknown parameter " + model.Quote(name, 32)}
		}
		if len(values) > 1 {
			return nil, &model.ValidationError{Field: name, Problem: "given more than once"}
		}
	}
	return query, nil
}

func (s *Server) taskEvents(w http.ResponseWriter, r *http.Request, p Principal) error {
	id := r.PathValue("id")
	t, err := s.Task(r.Context(), p, id)
	if err != nil {
		return err
	}
	events, err := s.Events(r.Context(), p, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.All(events, func(e model.Event) wire.Event { return wire.EventOf(e, t.User, t.Kind) }))
	return nil
}

// noBody refuses a body on a route that takes none (or an empty object).
func noBody(r *http.Request) error {
	var b struct{}
	if err := decode(r, &b, noIntegerFields); err != nil {
		if v, ok := err.(*model.ValidationError); ok && v.Problem == "required: a JSON object" {
			return nil
		}
		return err
	}
	return nil
}

func (s *Server) cancel(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := noBody(r); err != nil {
		return err
	}
	if _, err := s.Cancel(r.Context(), p, r.PathValue("id")); err != nil {
		return err
	}
	return s.answerTask(w, r, p)
}

// answerTask writes the task after an action on it.
func (s *Server) answerTask(w http.ResponseWriter, r *http.Request, p Principal) error {
	return s.writeTask(w, r, p, r.PathValue("id"))
}

func (s *Server) approve(w http.ResponseWriter, r *http.Request, p Principal) error {
	version, err := gateVersion(r)
	if err != nil {
		return err
	}
	if err := s.Approve(r.Context(), p, r.PathValue("id"), version); err != nil {
		return err
	}
	return s.answerTask(w, r, p)
}

func (s *Server) reject(w http.ResponseWriter, r *http.Request, p Principal) error {
	version, err := gateVersion(r)
	if err != nil {
		return err
	}
	if err := s.Reject(r.Context(), p, r.PathValue("id"), version); err != nil {
		return err
	}
	return s.answerTask(w, r, p)
}

// gateVersion reads the body of an approve or a reject: the version recorded
// at the gate, required.
func gateVersion(r *http.Request) (int64, error) {
	var b struct {
		Version *int64 `json:"version"`
	}
	if err := decode(r, &b, approveRanges); err != nil {
		return 0, err
	}
	if b.Version == nil {
		return 0, &model.ValidationError{Field: "version", Problem: "required: the version recorded at the gate"}
	}
	if err := checkRange(approveRanges, "version", *b.Version); err != nil {
		return 0, err
	}
	return *b.Version, nil
}

func (s *Server) requeue(w http.ResponseWriter, r *http.Request, p Principal) error {
	var b struct {
		GrantCost  *int64 `json:"grant_cost"`
		GrantSteps *int   `json:"grant_steps"`
	}
	if err := decode(r, &b, requeueRanges); err != nil {
		return err
	}
	if b.GrantCost == nil || b.GrantSteps == nil {
		return &model.ValidationError{Field: "grant_cost", Problem: "grant_cost and grant_steps are required (0 grants nothing)"}
	}
	if err := s.Requeue(r.Context(), p, r.PathValue("id"), model.Grant{Cost: *b.GrantCost, Steps: *b.GrantSteps}); err != nil {
		return err
	}
	return s.answerTask(w, r, p)
}

func (s *Server) resolve(w http.ResponseWriter, r *http.Request, p Principal) error {
	var b struct {
		As string `json:"as"`
	}
	if err := decode(r, &b, noIntegerFields); err != nil {
		return err
	}
	if err := s.Resolve(r.Context(), p, r.PathValue("id"), model.State(b.As)); err != nil {
		return err
	}
	return s.answerTask(w, r, p)
}

func (s *Server) settle(w http.ResponseWriter, r *http.Request, p Principal) error {
	op := r.PathValue("op")
	var b struct {
		Applied *bool `json:"applied"`
	}
	if err := decode(r, &b, noIntegerFields); err != nil {
		return err
	}
	if b.Applied == nil {
		return &model.ValidationError{Field: "applied", Problem: "required: true or false, as the provider reports"}
	}
	if err := s.SettleEffect(r.Context(), p, op, *b.Applied); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.Settled{OpID: op, Applied: *b.Applied, By: p.Name})
	return nil
}

func (s *Server) inspect(w http.ResponseWriter, r *http.Request, p Principal) error {
	out, err := s.Inspect(r.Context(), p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// metrics answers GET /v1/metrics: the queue's metrics snapshot, its
// counts by kind folded over the server's kinds as /metrics folds them.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request, p Principal) error {
	m, err := s.Metrics(r.Context(), p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.MetricsOf(m, s.kinds))
	return nil
}

func (s *Server) getLimits(w http.ResponseWriter, r *http.Request, p Principal) error {
	limits, users, err := s.Limits(r.Context(), p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.LimitsViewOf(limits, users))
	return nil
}

// setLimits changes the queue-wide limits the body names (PUT
// /v1/limits); the others stay as they are.
func (s *Server) setLimits(w http.ResponseWriter, r *http.Request, p Principal) error {
	var c wire.LimitsChange
	if err := decode(r, &c, limitsRanges); err != nil {
		return err
	}
	if err := s.UpdateLimits(r.Context(), p, model.LimitsChange(c)); err != nil {
		return err
	}
	return s.getLimits(w, r, p)
}

// setUserLimit changes the limits of one user the body names (PUT
// /v1/limits/users/{user}); the other keeps the user's override (or
// inherits).
func (s *Server) setUserLimit(w http.ResponseWriter, r *http.Request, p Principal) error {
	var c wire.UserLimitChange
	if err := decode(r, &c, userLimitRanges); err != nil {
		return err
	}
	if err := s.UpdateUserLimit(r.Context(), p, r.PathValue("user"), model.UserLimitChange(c)); err != nil {
		return err
	}
	return s.getLimits(w, r, p)
}

func (s *Server) listSchedules(w http.ResponseWriter, r *http.Request, p Principal) error {
	schedules, err := s.Schedules(r.Context(), p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.All(schedules, wire.ScheduleOf))
	return nil
}

func (s *Server) addSchedule(w http.ResponseWriter, r *http.Request, p Principal) error {
	var b wire.ScheduleRequest
	if err := decode(r, &b, scheduleRanges); err != nil {
		return err
	}
	// Checked before the conversion to a duration, which would overflow.
	if err := checkRange(scheduleRanges, "period_ms", b.PeriodMs); err != nil {
		return err
	}
	origin, err := wire.ParseTime("origin", b.Origin)
	if err != nil {
		return err
	}
	sch, err := s.AddSchedule(r.Context(), p, model.ScheduleSpec{User: b.User, Kind: b.Kind, Payload: string(b.Payload),
		CostBudget: b.CostBudget, StepsMax: b.StepsMax, Priority: b.Priority, Origin: origin,
		Period: durationMs(b.PeriodMs)})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, wire.ScheduleOf(sch))
	return nil
}

func (s *Server) removeSchedule(w http.ResponseWriter, r *http.Request, p Principal) error {
	if err := s.RemoveSchedule(r.Context(), p, r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

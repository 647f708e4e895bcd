package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/wire"
)

// Response bounds: a body larger than these is refused as malformed.
const (
	responseBytesMax = 64 << 20 // a page of ListLimitMax tasks fits
	errorBytesMax    = 64 << 10
)

// WaitMax is the longest wait the server grants a WaitTask.
const WaitMax = 60 * time.Second

// Client calls one leasehold server with one token. It is safe for
// concurrent use.
type Client struct {
	base   *url.URL
	secret string
	http   *http.Client
}

// Option changes a Client.
type Option func(*Client)

// WithHTTPClient sends requests through hc instead of a plain
// http.Client (for a transport of one's own, TLS settings or a proxy).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// New returns a client of the server at baseURL (http or https, no query)
// presenting secret as its bearer token.
func New(baseURL, secret string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("client: base URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("client: base URL %q: want http(s)://HOST[:PORT][/PREFIX]", baseURL)
	}
	if secret == "" || strings.ContainsAny(secret, " \t\r\n") {
		return nil, errors.New("client: the token secret must be non-empty and without spaces")
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	c := &Client{base: u, secret: secret, http: &http.Client{}}
	for _, opt := range opts {
		opt(c)
	}
	return c, nil
}

// endpoint is the URL of path (already escaped: each path value through
// url.PathEscape) with query.
func (c *Client) endpoint(path string, query url.Values) string {
	u := c.base.JoinPath(path)
	u.RawQuery = query.Encode()
	return u.String()
}

// do sends one request and decodes a 2xx body into out (unless out is
// nil); any other status is returned as an *Error.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, in, out any) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("client: %s %s: encode: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.endpoint(path, query), body)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.secret)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp, errorOf(resp)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, errorBytesMax))
		return resp, nil
	}
	dec := json.NewDecoder(io.LimitReader(resp.Body, responseBytesMax))
	if err := dec.Decode(out); err != nil {
		return resp, fmt.Errorf("client: %s %s: decode %d response: %w", method, path, resp.StatusCode, err)
	}
	return resp, nil
}

// errorOf reads a refusal's JSON body into an *Error; a body that is not
// the API's error object still gives the status.
func errorOf(resp *http.Response) error {
	var body wire.Error
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, errorBytesMax))
	e := &Error{Status: resp.StatusCode, RetryAfter: retryAfter(resp.Header)}
	if json.Unmarshal(raw, &body) == nil {
		e.Code, e.Field, e.Message = body.Code, body.Field, body.Error
	} else {
		e.Message = strings.TrimSpace(string(raw))
	}
	return e
}

func taskPath(id string, rest ...string) string {
	return "/v1/tasks/" + url.PathEscape(id) + strings.Join(rest, "")
}

// Submit submits one task. A replay of an earlier request under the same
// key returns the original task's ID with Replay set.
func (c *Client) Submit(ctx context.Context, req model.SubmitRequest) (SubmitResult, error) {
	var res SubmitResult
	_, err := c.do(ctx, http.MethodPost, "/v1/tasks", nil, wire.SubmitRequestOf(req), &res)
	return res, err
}

// SubmitMany submits a batch in one transaction: all are accepted (each
// new or a replay) or none. A refused item is named by its index in the
// error's Field ("tasks[3].payload").
func (c *Client) SubmitMany(ctx context.Context, reqs []model.SubmitRequest) ([]SubmitResult, error) {
	body := wire.BatchRequest{Tasks: wire.All(reqs, wire.SubmitRequestOf)}
	var res wire.BatchResult
	_, err := c.do(ctx, http.MethodPost, "/v1/tasks/batch", nil, body, &res)
	return res.Results, err
}

// Task returns one task.
func (c *Client) Task(ctx context.Context, id string) (Task, error) {
	var t Task
	_, err := c.do(ctx, http.MethodGet, taskPath(id), nil, nil, &t)
	return t, err
}

// WaitTask returns the task as soon as it has an audit event past
// afterSeq (a Task's LastEventSeq), or after wait (at most WaitMax)
// unchanged.
func (c *Client) WaitTask(ctx context.Context, id string, afterSeq int64, wait time.Duration) (Task, error) {
	var t Task
	q := url.Values{"wait": {wait.String()}, "after_seq": {strconv.FormatInt(afterSeq, 10)}}
	_, err := c.do(ctx, http.MethodGet, taskPath(id), q, nil, &t)
	return t, err
}

// List returns one page of tasks.
func (c *Client) List(ctx context.Context, o ListOptions) (TaskPage, error) {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("state", string(o.State))
	set("user", o.User)
	set("schedule_id", o.ScheduleID)
	set("kind", o.Kind)
	set("after", o.After)
	if !o.CreatedFrom.IsZero() {
		q.Set("created_from", o.CreatedFrom.UTC().Format(time.RFC3339Nano))
	}
	if !o.CreatedUntil.IsZero() {
		q.Set("created_until", o.CreatedUntil.UTC().Format(time.RFC3339Nano))
	}
	if o.Limit != 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Newest {
		q.Set("order", "newest")
	}
	var page TaskPage
	_, err := c.do(ctx, http.MethodGet, "/v1/tasks", q, nil, &page)
	return page, err
}

// Events returns one task's audit events in order.
func (c *Client) Events(ctx context.Context, id string) ([]Event, error) {
	var out []Event
	_, err := c.do(ctx, http.MethodGet, taskPath(id, "/events"), nil, nil, &out)
	return out, err
}

// Cancel cancels a task (a running one stops before its next step).
func (c *Client) Cancel(ctx context.Context, id string) (Task, error) {
	var t Task
	_, err := c.do(ctx, http.MethodPost, taskPath(id, "/cancel"), nil, struct{}{}, &t)
	return t, err
}

// Approve approves a task waiting at a gate; version is the task's
// version shown at the gate (a stale one is ErrVersionMismatch).
func (c *Client) Approve(ctx context.Context, id string, version int64) (Task, error) {
	var t Task
	_, err := c.do(ctx, http.MethodPost, taskPath(id, "/approve"), nil, map[string]int64{"version": version}, &t)
	return t, err
}

// Reject rejects a task waiting at a gate; like Approve, version is the
// task's version shown at the gate (a stale one is ErrVersionMismatch and
// rejects nothing).
func (c *Client) Reject(ctx context.Context, id string, version int64) (Task, error) {
	var t Task
	_, err := c.do(ctx, http.MethodPost, taskPath(id, "/reject"), nil, map[string]int64{"version": version}, &t)
	return t, err
}

// Requeue puts a task in review back in the queue with more budget.
func (c *Client) Requeue(ctx context.Context, id string, grantCost int64, grantSteps int) (Task, error) {
	var t Task
	body := map[string]int64{"grant_cost": grantCost, "grant_steps": int64(grantSteps)}
	_, err := c.do(ctx, http.MethodPost, taskPath(id, "/requeue"), nil, body, &t)
	return t, err
}

// Resolve settles a task in review as completed, failed or cancelled.
func (c *Client) Resolve(ctx context.Context, id string, as model.State) (Task, error) {
	var t Task
	_, err := c.do(ctx, http.MethodPost, taskPath(id, "/resolve"), nil, map[string]string{"as": string(as)}, &t)
	return t, err
}

// SettleEffect records what the provider says of an effect without a
// receipt.
func (c *Client) SettleEffect(ctx context.Context, opID string, applied bool) (Settled, error) {
	var s Settled
	_, err := c.do(ctx, http.MethodPost, "/v1/effects/"+url.PathEscape(opID)+"/settle", nil, map[string]bool{"applied": applied}, &s)
	return s, err
}

// Inspect returns the stuck and uncertain tasks.
func (c *Client) Inspect(ctx context.Context) ([]Inspection, error) {
	var out []Inspection
	_, err := c.do(ctx, http.MethodGet, "/v1/inspect", nil, nil, &out)
	return out, err
}

// Metrics returns the queue's metrics snapshot: the depth by state, the
// outcome counters over every kind and by kind (Metrics.ByKind: the
// server's kinds by name, every other kind under KindOther), and the
// queue-wait and run-time distributions.
func (c *Client) Metrics(ctx context.Context) (Metrics, error) {
	var m Metrics
	_, err := c.do(ctx, http.MethodGet, "/v1/metrics", nil, nil, &m)
	return m, err
}

// Limits returns the queue-wide limits and the users' overrides.
func (c *Client) Limits(ctx context.Context) (LimitsView, error) {
	var v LimitsView
	_, err := c.do(ctx, http.MethodGet, "/v1/limits", nil, nil, &v)
	return v, err
}

// UpdateLimits changes the queue-wide limits ch names, leaving the others
// as they are, and returns the limits after the change.
func (c *Client) UpdateLimits(ctx context.Context, ch LimitsChange) (LimitsView, error) {
	var v LimitsView
	_, err := c.do(ctx, http.MethodPut, "/v1/limits", nil, ch, &v)
	return v, err
}

// SetLimits sets every queue-wide limit to l's (a field left zero is set
// to zero, and refused where zero is out of its range); UpdateLimits
// changes only the limits it names.
func (c *Client) SetLimits(ctx context.Context, l Limits) (LimitsView, error) {
	var v LimitsView
	_, err := c.do(ctx, http.MethodPut, "/v1/limits", nil, l, &v)
	return v, err
}

// UpdateUserLimit changes the limits ch names of user's override; the
// other keeps its value (or inherits).
func (c *Client) UpdateUserLimit(ctx context.Context, user string, ch UserLimitChange) (LimitsView, error) {
	var v LimitsView
	_, err := c.do(ctx, http.MethodPut, "/v1/limits/users/"+url.PathEscape(user), nil, ch, &v)
	return v, err
}

// SetUserLimit sets both of one user's limits (model.Inherit for either
// inherits the queue-wide limit).
func (c *Client) SetUserLimit(ctx context.Context, u UserLimit) (LimitsView, error) {
	var v LimitsView
	body := map[string]int{"running_max": u.RunningMax, "depth_max": u.DepthMax}
	_, err := c.do(ctx, http.MethodPut, "/v1/limits/users/"+url.PathEscape(u.User), nil, body, &v)
	return v, err
}

// Schedules returns every schedule.
func (c *Client) Schedules(ctx context.Context) ([]Schedule, error) {
	var out []Schedule
	_, err := c.do(ctx, http.MethodGet, "/v1/schedules", nil, nil, &out)
	return out, err
}

// AddSchedule adds a periodic task.
func (c *Client) AddSchedule(ctx context.Context, s ScheduleSpec) (Schedule, error) {
	body := wire.ScheduleRequest{User: s.User, Kind: s.Kind, Payload: json.RawMessage(s.Payload), CostBudget: s.CostBudget,
		StepsMax: s.StepsMax, Priority: s.Priority, Origin: wire.TimeOf(s.Origin).String(), PeriodMs: s.Period.Milliseconds()}
	var out Schedule
	_, err := c.do(ctx, http.MethodPost, "/v1/schedules", nil, body, &out)
	return out, err
}

// RemoveSchedule removes a schedule.
func (c *Client) RemoveSchedule(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/schedules/"+url.PathEscape(id), nil, nil, nil)
	return err
}

// Health asks /healthz; a 503 is returned as the Health it reports, with
// an *Error matching ErrUnavailable.
func (c *Client) Health(ctx context.Context) (Health, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.endpoint("/healthz", nil), nil)
	if err != nil {
		return Health{}, fmt.Errorf("client: healthz: %w", err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return Health{}, fmt.Errorf("client: healthz: %w", err)
	}
	defer resp.Body.Close()
	var h Health
	if err := json.NewDecoder(io.LimitReader(resp.Body, errorBytesMax)).Decode(&h); err != nil {
		return Health{}, fmt.Errorf("client: healthz: decode %d response: %w", resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusOK {
		return h, &Error{Status: resp.StatusCode, Code: "unavailable", Message: h.Class}
	}
	return h, nil
}

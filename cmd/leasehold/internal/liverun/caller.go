package liverun

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/scenarios"
)

// The run's caller: the Go client over HTTP to the `leasehold serve`
// process the run starts over the workers' database.

// Caller timing.
const (
	serverStarts = 3                      // tries at starting the server (another process may take the port chosen)
	waitSlice    = 5 * time.Second        // the longest single long-poll of a waiting story
	logSlice     = 500 * time.Millisecond // a long-poll's length while a story also watches a worker's log
	callTimeout  = 15 * time.Second       // one client call's bound (a wait's own length aside)
)

// caller holds one client per token the run's server knows: a submit
// token per user, named after the user, so that the audit trail records
// the user as the actor of its submits and cancels; an approve token per
// approver, named after the approver; and the operator's.
type caller struct {
	base      string
	users     map[string]*client.Client
	approvers map[string]*client.Client
	operator  *client.Client
	// lines are the server's token lines ("NAME SCOPE SECRET USERS").
	lines []string
}

// newCaller makes a secret for each token of the scenario's users and
// approvers and the run's operator, and the clients that present them.
func newCaller(base string, users, approvers []string) (*caller, error) {
	c := &caller{base: base, users: map[string]*client.Client{}, approvers: map[string]*client.Client{}}
	hc := &http.Client{Timeout: waitSlice + callTimeout}
	add := func(name, scope, forUsers string) (*client.Client, error) {
		secret, err := newSecret()
		if err != nil {
			return nil, err
		}
		c.lines = append(c.lines, strings.Join([]string{name, scope, secret, forUsers}, " "))
		cl, err := client.New(base, secret, client.WithHTTPClient(hc))
		if err != nil {
			return nil, fmt.Errorf("the client of token %s: %w", name, err)
		}
		return cl, nil
	}
	var err error
	for _, u := range users {
		if c.users[u], err = add(u, model.ScopeSubmit, u); err != nil {
			return nil, err
		}
	}
	for _, a := range approvers {
		if c.approvers[a], err = add(a, model.ScopeApprove, "*"); err != nil {
			return nil, err
		}
	}
	if c.operator, err = add(operator, model.ScopeOperate, "*"); err != nil {
		return nil, err
	}
	return c, nil
}

// tokensEnv is the server's tokens as LEASEHOLD_TOKENS carries them: the
// secrets reach the server through its environment, never a file or an
// argument.
func (c *caller) tokensEnv() string {
	return "LEASEHOLD_TOKENS=" + strings.Join(c.lines, ";")
}

func newSecret() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("make a token secret: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// freeAddr asks the system for a free loopback port. The server binds it
// a moment later; should another process take it meanwhile, the server
// exits and startServer tries again.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	return addr, nil
}

// scenarioActors are the users whose tasks the run submits and the
// approvers its approvals name (each task's expected approver, or its
// gates).
func scenarioActors(sc scenarios.Scenario, extra map[string]model.SubmitRequest) (users, approvers []string) {
	us, as := map[string]bool{}, map[string]bool{}
	for _, t := range sc.Tasks {
		us[t.Request.User] = true
		if t.Expect.ApprovedBy != "" {
			as[t.Expect.ApprovedBy] = true
		}
		for _, g := range gates(t.Request.Payload) {
			as[g] = true
		}
	}
	for _, req := range extra {
		us[req.User] = true
	}
	return sortedKeys(us), sortedKeys(as)
}

// gates are the approval gates a payload's steps name.
func gates(payload string) []string {
	var p struct {
		Steps []struct {
			Approval string `json:"approval"`
		} `json:"steps"`
	}
	if json.Unmarshal([]byte(payload), &p) != nil {
		return nil
	}
	var out []string
	for _, s := range p.Steps {
		if s.Approval != "" {
			out = append(out, s.Approval)
		}
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// startServer starts `leasehold serve` over the run's database with the
// caller's tokens and waits until it answers /healthz.
func (r *run) startServer() error {
	users, approvers := scenarioActors(r.sc, storyTasks)
	var last error
	for range serverStarts {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		c, err := newCaller("http://"+addr, users, approvers)
		if err != nil {
			return err
		}
		dbArgs, dbEnv := r.dbArgs()
		p, err := r.startProc("serve", append(append([]string{"serve"}, dbArgs...), "--addr", addr, "--strict-tokens",
			"--busy-timeout", callerBusy.String()), append([]string{c.tokensEnv()}, dbEnv...))
		if err != nil {
			return err
		}
		if last = r.waitServing(p, c.operator); last == nil {
			r.c = c
			r.res.Settings["caller"] = fmt.Sprintf("the Go client over HTTP to leasehold serve at %s (pid %d): a submit token per user, an approve token per approver, one operate token", addr, p.cmd.Process.Pid)
			r.moment(Moment{Kind: ServerStarted, Worker: "serve", PID: p.cmd.Process.Pid, Addr: addr})
			return nil
		}
		r.stop(p)
	}
	return fmt.Errorf("start the API server (see serve.log): %w", last)
}

// waitServing waits until the server answers /healthz, or has exited.
func (r *run) waitServing(p *proc, c *client.Client) error {
	deadline := time.Now().Add(storyMax)
	for {
		ctx, cancel := context.WithTimeout(r.ctx, time.Second)
		_, err := c.Health(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server did not answer /healthz in %s: %w", storyMax, err)
		}
		select {
		case <-p.done:
			return errors.New("the server exited before it answered")
		case <-r.ctx.Done():
			return r.ctx.Err()
		case <-time.After(pollEvery):
		}
	}
}

// userOf is the client of the scenario task's user.
func (r *run) userOf(name string) *client.Client { return r.c.users[r.reqs[name].User] }

// callCtx bounds one client call.
func (r *run) callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.ctx, callTimeout)
}

// task reads a task through the API, as its user.
func (r *run) task(name string) (client.Task, error) {
	ctx, cancel := r.callCtx()
	defer cancel()
	return r.userOf(name).Task(ctx, r.ids[name])
}

// events reads a task's audit events through the API, as its user.
func (r *run) events(name string) ([]client.Event, error) {
	ctx, cancel := r.callCtx()
	defer cancel()
	return r.userOf(name).Events(ctx, r.ids[name])
}

// watch waits until cond holds of the task, or the story's time runs
// out. Between looks it long-polls the server for the task's next event
// (at most slice), so it wakes on each change rather than on a timer; a
// call that fails (the database locked, say) is tried again after
// pollEvery.
func (r *run) watch(name, what string, slice time.Duration, cond func(client.Task) (bool, error)) (client.Task, error) {
	deadline := time.Now().Add(storyMax)
	t, err := r.task(name)
	for {
		if err == nil {
			var ok bool
			if ok, err = cond(t); ok && err == nil {
				return t, nil
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			if err != nil {
				return t, fmt.Errorf("waiting for %s: %w", what, err)
			}
			return t, fmt.Errorf("waiting for %s: timed out after %s", what, storyMax)
		}
		if err != nil {
			select {
			case <-r.ctx.Done():
				return t, fmt.Errorf("waiting for %s: %w", what, r.ctx.Err())
			case <-time.After(pollEvery):
			}
			t, err = r.task(name)
			continue
		}
		ctx, cancel := context.WithTimeout(r.ctx, min(left, slice)+callTimeout)
		next, werr := r.userOf(name).WaitTask(ctx, r.ids[name], t.LastEventSeq, min(left, slice))
		cancel()
		if r.ctx.Err() != nil {
			return t, fmt.Errorf("waiting for %s: %w", what, r.ctx.Err())
		}
		if werr == nil {
			t = next
		}
		err = werr
	}
}

// waitState waits until the task is in one of states and returns it.
func (r *run) waitState(name string, states ...model.State) (client.Task, error) {
	return r.watch(name, fmt.Sprintf("%s to be %v", name, states), waitSlice, func(t client.Task) (bool, error) {
		for _, s := range states {
			if t.State == s {
				return true, nil
			}
		}
		return false, nil
	})
}

// submit submits a task through the API as its user.
func (r *run) submit(name string, req model.SubmitRequest) error {
	c := r.c.users[req.User]
	if c == nil {
		return fmt.Errorf("submit %s: the run has no token for user %s", name, req.User)
	}
	ctx, cancel := r.callCtx()
	defer cancel()
	res, err := c.Submit(ctx, req)
	if err != nil {
		return fmt.Errorf("submit %s: %w", name, err)
	}
	r.ids[name], r.reqs[name] = res.TaskID, req
	r.moment(Moment{Kind: TaskSubmitted, Task: name, TaskID: res.TaskID})
	return nil
}

// setLimits applies the scenario's attempt limit and per-user limits, as
// the operator.
func (r *run) setLimits() error {
	ctx, cancel := r.callCtx()
	defer cancel()
	view, err := r.c.operator.Limits(ctx)
	if err != nil {
		return fmt.Errorf("read the limits: %w", err)
	}
	if r.sc.AttemptsMax > 0 {
		limits := view.Limits
		limits.AttemptsMax = r.sc.AttemptsMax
		if _, err := r.c.operator.SetLimits(ctx, limits); err != nil {
			return fmt.Errorf("set the attempt limit: %w", err)
		}
	}
	for _, u := range r.sc.UserLimits {
		if _, err := r.c.operator.SetUserLimit(ctx, client.UserLimit{User: u.User, RunningMax: u.RunningMax, DepthMax: u.DepthMax}); err != nil {
			return fmt.Errorf("set user %s's limits: %w", u.User, err)
		}
		r.moment(Moment{Kind: LimitSet, Actor: u.User, Version: int64(u.RunningMax)})
	}
	return nil
}

// refusedAs reports whether err is the server's refusal with code.
func refusedAs(err error, code string) bool {
	var e *client.Error
	return errors.As(err, &e) && e.Code == code
}

package queuetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// A transcript is a script of queue operations, each followed by the
// output the contract promises for it, in the style of etcd's raft tests:
//
//	# a comment
//	submit key=k1 budget=10 steps=3
//	----
//	t1
//
// A case is one command line, a line "----" and its expected output up to
// the next blank line. Tasks are named t1, t2, ... and schedules s1, s2, ...
// in the order the script first meets them, and times are printed as
// offsets from the clock's start (+31s), so the output is the same for
// every store. RunTranscript runs one script against one store.

// TranscriptSeparator divides a command from its expected output.
const TranscriptSeparator = "----"

// transcriptCase is one command of a script with its expected output and
// the comment and blank lines above it.
type transcriptCase struct {
	lead    []string
	line    int
	command string
	want    string
}

// Transcripts returns the scripts (*.txt) in dir, sorted.
func Transcripts(t *testing.T, dir string) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	require.NoError(t, err)
	require.NotEmpty(t, paths, "no transcripts in %s", dir)
	sort.Strings(paths)
	return paths
}

func parseTranscript(path string) ([]transcriptCase, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("open transcript: %w", err)
	}
	defer f.Close()
	var cases []transcriptCase
	var lead []string
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			lead = append(lead, line)
			continue
		}
		c := transcriptCase{lead: lead, line: n, command: trimmed}
		lead = nil
		if !sc.Scan() {
			return nil, nil, fmt.Errorf("%s:%d: command without %q", path, n, TranscriptSeparator)
		}
		n++
		if sc.Text() != TranscriptSeparator {
			return nil, nil, fmt.Errorf("%s:%d: want %q after the command, got %q", path, n, TranscriptSeparator, sc.Text())
		}
		var out []string
		for sc.Scan() {
			n++
			if strings.TrimSpace(sc.Text()) == "" {
				lead = append(lead, "")
				break
			}
			out = append(out, sc.Text())
		}
		c.want = strings.Join(out, "\n")
		cases = append(cases, c)
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("read transcript: %w", err)
	}
	return cases, lead, nil
}

// RunTranscript runs the script at path against the store of h, which must
// be fresh and empty. Each command's output must equal the expected output;
// with rewrite, the file is rewritten with the outputs instead.
func RunTranscript(t *testing.T, path string, h Harness, rewrite bool) {
	t.Helper()
	cases, tail, err := parseTranscript(path)
	require.NoError(t, err)
	r := &transcriptRun{t: t, ctx: context.Background(), h: h, epoch: model.Truncate(h.Clock.Now()),
		names: map[string]string{}, ids: map[string]string{}, claims: map[string]map[int64]model.Claim{}}
	var b strings.Builder
	for _, c := range cases {
		got := r.run(c)
		if rewrite {
			for _, l := range c.lead {
				b.WriteString(l + "\n")
			}
			fmt.Fprintf(&b, "%s\n%s\n%s\n", c.command, TranscriptSeparator, got)
			continue
		}
		require.Equal(t, c.want, got, "%s:%d: %s", filepath.Base(path), c.line, c.command)
	}
	if rewrite {
		for _, l := range tail {
			b.WriteString(l + "\n")
		}
		out := strings.TrimRight(b.String(), "\n") + "\n"
		require.NoError(t, os.WriteFile(path, []byte(out), 0o644))
	}
}

// transcriptRun is one script's run against one store.
type transcriptRun struct {
	t     *testing.T
	ctx   context.Context
	h     Harness
	epoch time.Time
	// names maps store IDs (tasks, schedules) to the script's names and
	// ids the names back.
	names  map[string]string
	ids    map[string]string
	tasks  int
	scheds int
	// claims holds every claim made, by task name and fence, so a script
	// can write under an old claim.
	claims map[string]map[int64]model.Claim
}

// command is a parsed command line: its verb, positional words and
// key=value arguments.
type command struct {
	verb string
	pos  []string
	args map[string]string
	used map[string]bool
}

func parseCommand(line string) *command {
	fields := strings.Fields(line)
	c := &command{verb: fields[0], args: map[string]string{}, used: map[string]bool{}}
	for _, f := range fields[1:] {
		if k, v, ok := strings.Cut(f, "="); ok {
			c.args[k] = v
		} else {
			c.pos = append(c.pos, f)
		}
	}
	return c
}

// scriptError is a mistake in the script itself, not a queue outcome.
type scriptError struct{ msg string }

func (e scriptError) Error() string { return e.msg }

func badScript(format string, args ...any) { panic(scriptError{fmt.Sprintf(format, args...)}) }

func (c *command) str(key, def string) string {
	c.used[key] = true
	if v, ok := c.args[key]; ok {
		return v
	}
	return def
}

func (c *command) need(key string) string {
	v, ok := c.args[key]
	if !ok {
		badScript("%s needs %s=", c.verb, key)
	}
	return c.str(key, v)
}

func (c *command) int(key string, def int64) int64 {
	v := c.str(key, "")
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		badScript("%s: %s=%q is not an integer", c.verb, key, v)
	}
	return n
}

func (c *command) dur(key string, def time.Duration) time.Duration {
	v := c.str(key, "")
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		badScript("%s: %s=%q is not a duration", c.verb, key, v)
	}
	return d
}

// at reads a time written as an offset from the clock's start ("+90s").
func (r *transcriptRun) at(c *command, key string) time.Time {
	v := c.str(key, "")
	if v == "" {
		return time.Time{}
	}
	d, err := time.ParseDuration(strings.TrimPrefix(v, "+"))
	if err != nil {
		badScript("%s: %s=%q is not an offset such as +90s", c.verb, key, v)
	}
	return r.epoch.Add(d)
}

func (r *transcriptRun) run(tc transcriptCase) (out string) {
	c := parseCommand(tc.command)
	defer func() {
		if p := recover(); p != nil {
			if e, ok := p.(scriptError); ok {
				r.t.Fatalf("line %d: %s: %s", tc.line, tc.command, e.msg)
			}
			panic(p)
		}
	}()
	out = r.do(c)
	for k := range c.args {
		if !c.used[k] {
			badScript("%s does not take %s=", c.verb, k)
		}
	}
	return r.rename(out)
}

// rename replaces every store ID in s by its script name; IDs the script
// has not met yet get the next name.
func (r *transcriptRun) rename(s string) string {
	for id, name := range r.names {
		s = strings.ReplaceAll(s, id, name)
	}
	return s
}

func (r *transcriptRun) name(id string) string {
	if n, ok := r.names[id]; ok {
		return n
	}
	var n string
	if strings.HasPrefix(id, model.ScheduleIDPrefix) {
		r.scheds++
		n = fmt.Sprintf("s%d", r.scheds)
	} else {
		r.tasks++
		n = fmt.Sprintf("t%d", r.tasks)
	}
	r.names[id], r.ids[n] = n, id
	return n
}

// id returns the store ID of the task or schedule the command names first.
func (r *transcriptRun) id(c *command) string {
	if len(c.pos) == 0 {
		badScript("%s names no task", c.verb)
	}
	id, ok := r.ids[c.pos[0]]
	if !ok {
		badScript("%s: no task or schedule %s yet", c.verb, c.pos[0])
	}
	return id
}

// claim returns the claim of the named task under fence=.
func (r *transcriptRun) claim(c *command) model.Claim {
	id := r.id(c)
	fence := c.int("fence", 0)
	cl, ok := r.claims[r.names[id]][fence]
	if !ok {
		badScript("%s: %s was never claimed under fence %d", c.verb, c.pos[0], fence)
	}
	return cl
}

// offset prints a time as an offset from the clock's start; "-" if unset.
func (r *transcriptRun) offset(at time.Time) string {
	if at.IsZero() {
		return "-"
	}
	return "+" + at.Sub(r.epoch).String()
}

// outcome prints err as the sentinel it is, never its wording, which may
// differ between stores.
func outcome(err error) string {
	var v *model.ValidationError
	if errors.As(err, &v) {
		return "error: invalid input: " + v.Field
	}
	for _, s := range []error{model.ErrStaleClaim, model.ErrIdempotencyConflict, model.ErrQueueFull,
		model.ErrVersionMismatch, model.ErrBudgetExhausted, model.ErrStepsExhausted, model.ErrStepConflict,
		model.ErrDeadlineExceeded, model.ErrEffectReceipted, model.ErrInvalidTransition, model.ErrNotFound,
		model.ErrInvalidInput} {
		if errors.Is(err, s) {
			return "error: " + s.Error()
		}
	}
	return "error: unclassified: " + err.Error()
}

// do runs one command and returns what it prints. The commands are in
// four areas: a worker's writes, an operator's, time (the clock, the
// reaper and schedules) and reads.
func (r *transcriptRun) do(c *command) string {
	for _, area := range []func(*command) (string, bool){r.workerCommand, r.operatorCommand, r.timeCommand, r.readCommand} {
		if out, ok := area(c); ok {
			return out
		}
	}
	badScript("unknown command %q", c.verb)
	return ""
}

// done prints err as outcome does, or ok when there is none.
func done(err error, ok string) string {
	if err != nil {
		return outcome(err)
	}
	return ok
}

// workerCommand runs a worker's command: submit, claim, and every write
// under a claim.
func (r *transcriptRun) workerCommand(c *command) (string, bool) {
	s, ctx := r.h.Store, r.ctx
	switch c.verb {
	case "submit":
		return r.submit(c), true
	case "claim":
		return r.claimTasks(c), true
	case "heartbeat":
		res, err := s.Heartbeat(ctx, r.claim(c), c.dur("lease", 30*time.Second))
		return done(err, fmt.Sprintf("lease_until=%s cancel_requested=%t", r.offset(res.LeaseUntil), res.CancelRequested)), true
	case "step":
		res, err := s.CompleteStep(ctx, model.StepWrite{Claim: r.claim(c), Index: int(c.int("index", 0)),
			Cost: c.int("cost", 0), Checkpoint: c.str("checkpoint", "")})
		return done(err, fmt.Sprintf("replayed=%t cancel_requested=%t", res.Replayed, res.CancelRequested)), true
	case "intent":
		res, err := s.RecordIntent(ctx, r.claim(c), int(c.int("step", 0)))
		out := fmt.Sprintf("op=%s %s", res.OpID, res.Status)
		if res.Result != "" {
			out += " result=" + res.Result
		}
		return done(err, out), true
	case "receipt":
		cl := r.claim(c)
		return done(s.RecordReceipt(ctx, cl, model.OperationID(cl.TaskID, int(c.int("step", 0))), c.str("result", "ok")), "ok"), true
	case "pause":
		to, err := s.Pause(ctx, r.claim(c), int(c.int("step", 0)), c.str("gate", "manager"))
		return done(err, string(to)), true
	case "complete":
		return done(s.Complete(ctx, r.claim(c)), "ok"), true
	case "fail":
		cl := r.claim(c)
		f := model.Failure{Class: model.FailureClass(c.need("class")), Reason: model.Reason(c.str("reason", "")),
			Message: c.str("message", "")}
		if step := c.str("step", ""); step != "" {
			f.OpID = model.OperationID(cl.TaskID, int(c.int("step", 0)))
		}
		to, err := s.Fail(ctx, cl, f)
		return done(err, string(to)), true
	case "release":
		to, err := s.Release(ctx, r.claim(c))
		return done(err, string(to)), true
	case "ack-cancel":
		return done(s.AcknowledgeCancel(ctx, r.claim(c)), "ok"), true
	}
	return "", false
}

// submit runs submit: the task's name, and "replay" for a replay.
func (r *transcriptRun) submit(c *command) string {
	res, err := r.h.Store.Submit(r.ctx, model.SubmitRequest{User: c.str("user", "ana"), Key: c.need("key"),
		Payload: c.str("payload", `{"steps":[]}`), CostBudget: c.int("budget", 10), StepsMax: int(c.int("steps", 5)),
		Priority: int(c.int("priority", 0)), RunAt: r.at(c, "run_at"), Deadline: r.at(c, "deadline")})
	if err != nil {
		return outcome(err)
	}
	if res.Replay {
		return r.name(res.TaskID) + " replay"
	}
	return r.name(res.TaskID)
}

// claimTasks runs claim, keeping each claim by task and fence for the
// commands that write under it.
func (r *transcriptRun) claimTasks(c *command) string {
	claimed, err := r.h.Store.Claim(r.ctx, model.ClaimRequest{Worker: c.str("worker", "w1"), Max: int(c.int("max", 1)),
		Lease: c.dur("lease", 30*time.Second)})
	if err != nil {
		return outcome(err)
	}
	if len(claimed) == 0 {
		return "none"
	}
	var lines []string
	for _, cl := range claimed {
		n := r.name(cl.Claim.TaskID)
		if r.claims[n] == nil {
			r.claims[n] = map[int64]model.Claim{}
		}
		r.claims[n][cl.Claim.Fence] = cl.Claim
		lines = append(lines, fmt.Sprintf("%s fence=%d attempt=%d owner=%s lease_until=%s", n, cl.Claim.Fence,
			cl.Claim.Attempt, cl.Claim.Owner, r.offset(cl.Claim.LeaseUntil)))
	}
	return strings.Join(lines, "\n")
}

// operatorCommand runs an operator's command.
func (r *transcriptRun) operatorCommand(c *command) (string, bool) {
	s, ctx := r.h.Store, r.ctx
	switch c.verb {
	case "cancel":
		task, err := s.Cancel(ctx, r.id(c), c.str("actor", "ana"))
		if err != nil {
			return outcome(err), true
		}
		return r.taskLine(task), true
	case "approve":
		return done(s.Approve(ctx, r.id(c), c.int("version", 0), c.str("actor", "mia")), "ok"), true
	case "reject":
		return done(s.Reject(ctx, r.id(c), c.int("version", 0), c.str("actor", "mia")), "ok"), true
	case "requeue":
		return done(s.Requeue(ctx, r.id(c), model.Grant{Cost: c.int("cost", 0), Steps: int(c.int("steps", 0))},
			c.str("actor", "ops")), "ok"), true
	case "resolve":
		return done(s.Resolve(ctx, r.id(c), model.State(c.need("as")), c.str("actor", "ops")), "ok"), true
	case "settle":
		id := r.id(c)
		return done(s.SettleEffect(ctx, model.OperationID(id, int(c.int("step", 0))), c.str("applied", "") == "true",
			c.str("actor", "ops")), "ok"), true
	case "limits":
		return r.limits(c), true
	}
	return "", false
}

// timeCommand runs a command of time: the clock, the reaper and the
// schedules.
func (r *transcriptRun) timeCommand(c *command) (string, bool) {
	s, ctx := r.h.Store, r.ctx
	switch c.verb {
	case "advance":
		if len(c.pos) != 1 {
			badScript("advance takes one duration")
		}
		d, err := time.ParseDuration(c.pos[0])
		if err != nil {
			badScript("advance: %v", err)
		}
		r.h.Clock.Advance(d)
		return "now=" + r.offset(model.Truncate(r.h.Clock.Now())), true
	case "reap":
		res, err := s.Reap(ctx)
		return done(err, fmt.Sprintf("expired=%d deadlines=%d", res.Expired, res.Deadlines)), true
	case "schedule":
		sched, err := s.AddSchedule(ctx, model.ScheduleSpec{User: c.str("user", "ana"),
			Payload: c.str("payload", `{"steps":[]}`), CostBudget: c.int("budget", 10), StepsMax: int(c.int("steps", 5)),
			Origin: r.at(c, "origin"), Period: c.dur("period", time.Hour)}, c.str("actor", "ops"))
		if err != nil {
			return outcome(err), true
		}
		return r.name(sched.ID), true
	case "enqueue":
		res, err := s.EnqueueDue(ctx)
		return done(err, fmt.Sprintf("enqueued=%d collapsed=%d refused=%d", res.Enqueued, res.Collapsed, res.Refused)), true
	case "runs":
		return r.runs(c), true
	}
	return "", false
}

// readCommand runs a read.
func (r *transcriptRun) readCommand(c *command) (string, bool) {
	switch c.verb {
	case "task":
		task, err := r.h.Store.Task(r.ctx, r.id(c))
		if err != nil {
			return outcome(err), true
		}
		return r.taskLine(task), true
	case "events":
		return r.events(c), true
	case "effects":
		return r.effects(c), true
	case "list":
		return r.list(c), true
	}
	return "", false
}

// list runs list: each task's name and state, in name order.
func (r *transcriptRun) list(c *command) string {
	tasks, err := r.h.Store.List(r.ctx, model.ListFilter{State: model.State(c.str("state", "")), Limit: model.ListLimitMax})
	if err != nil {
		return outcome(err)
	}
	var lines []string
	for _, task := range tasks {
		lines = append(lines, r.name(task.ID)+" "+string(task.State))
	}
	sort.Strings(lines)
	if len(lines) == 0 {
		return "none"
	}
	return strings.Join(lines, "\n")
}

func (r *transcriptRun) limits(c *command) string {
	l, _, err := r.h.Store.Limits(r.ctx)
	if err != nil {
		return outcome(err)
	}
	set := func(key string, p *int) {
		if _, ok := c.args[key]; ok {
			*p = int(c.int(key, 0))
		}
	}
	set("depth_max", &l.DepthMax)
	set("user_depth_max", &l.UserDepthMax)
	set("user_running_max", &l.UserRunningMax)
	set("attempts_max", &l.AttemptsMax)
	set("grant_steps_max", &l.GrantStepsMax)
	set("claim_batch_max", &l.ClaimBatchMax)
	if _, ok := c.args["grant_cost_max"]; ok {
		l.GrantCostMax = c.int("grant_cost_max", 0)
	}
	if err := r.h.Store.SetLimits(r.ctx, l, "ops"); err != nil {
		return outcome(err)
	}
	return "ok"
}

// taskLine prints what the contract says of a task; fields that are unset
// are left out.
func (r *transcriptRun) taskLine(t model.Task) string {
	f := []string{r.name(t.ID), "state=" + string(t.State)}
	if t.Reason != model.NoReason {
		f = append(f, "reason="+string(t.Reason))
	}
	f = append(f, fmt.Sprintf("version=%d attempt=%d charged=%d/%d cost=%d/%d steps=%d/%d", t.Version, t.Attempt,
		t.AttemptsCharged, t.AttemptsMax, t.CostUsed, t.CostBudget, t.StepsUsed, t.StepsMax))
	if t.State == model.Queued {
		f = append(f, "run_at="+r.offset(t.RunAt))
	}
	if !t.Deadline.IsZero() {
		f = append(f, "deadline="+r.offset(t.Deadline))
	}
	if t.State == model.Running {
		f = append(f, "owner="+t.Owner, "lease_until="+r.offset(t.LeaseUntil))
	}
	if t.CancelRequested {
		f = append(f, "cancel_requested")
	}
	if t.CancelledBy != "" {
		f = append(f, "cancelled_by="+t.CancelledBy)
	}
	if t.State == model.WaitingForApproval {
		f = append(f, fmt.Sprintf("gate=%s approval_version=%d", t.ApprovalGate, t.ApprovalVersion))
	}
	if t.ApprovedBy != "" {
		f = append(f, "approved_by="+t.ApprovedBy)
	}
	if t.Checkpoint != "" {
		f = append(f, "checkpoint="+t.Checkpoint)
	}
	if t.ScheduleID != "" {
		f = append(f, fmt.Sprintf("schedule=%s run=%d", r.name(t.ScheduleID), t.ScheduleRun))
	}
	return strings.Join(f, " ")
}

func (r *transcriptRun) events(c *command) string {
	events, err := r.h.Store.Events(r.ctx, r.id(c))
	if err != nil {
		return outcome(err)
	}
	var lines []string
	for _, e := range events {
		l := fmt.Sprintf("%s %s attempt=%d fence=%d %s>%s", r.offset(e.At), e.Kind, e.Attempt, e.Fence, stateOr(e.From), stateOr(e.To))
		if e.Reason != model.NoReason {
			l += " reason=" + string(e.Reason)
		}
		if e.Actor != "" {
			l += " actor=" + e.Actor
		}
		if e.OpID != "" {
			l += " op=" + e.OpID
		}
		if e.Detail != "" {
			l += fmt.Sprintf(" detail=%q", e.Detail)
		}
		lines = append(lines, l)
	}
	return strings.Join(lines, "\n")
}

func stateOr(s model.State) string {
	if s == "" {
		return "-"
	}
	return string(s)
}

func (r *transcriptRun) effects(c *command) string {
	effects, err := r.h.Store.Effects(r.ctx, r.id(c))
	if err != nil {
		return outcome(err)
	}
	if len(effects) == 0 {
		return "none"
	}
	var lines []string
	for _, e := range effects {
		l := fmt.Sprintf("op=%s step=%d intent_fence=%d", e.OpID, e.Step, e.IntentFence)
		switch {
		case !e.Receipted():
			l += " receipt=none"
		case e.ReceiptBy != "":
			l += fmt.Sprintf(" receipt_by=%s result=%s", e.ReceiptBy, e.Result)
		default:
			l += fmt.Sprintf(" receipt_fence=%d result=%s", e.ReceiptFence, e.Result)
		}
		lines = append(lines, l)
	}
	return strings.Join(lines, "\n")
}

// runs lists a schedule's tasks in run order.
func (r *transcriptRun) runs(c *command) string {
	sched := r.id(c)
	tasks, err := r.h.Store.List(r.ctx, model.ListFilter{Limit: model.ListLimitMax})
	if err != nil {
		return outcome(err)
	}
	var mine []model.Task
	for _, t := range tasks {
		if t.ScheduleID == sched {
			mine = append(mine, t)
		}
	}
	sort.Slice(mine, func(i, j int) bool { return mine[i].ScheduleRun < mine[j].ScheduleRun })
	if len(mine) == 0 {
		return "none"
	}
	var lines []string
	for _, t := range mine {
		lines = append(lines, fmt.Sprintf("run=%d %s state=%s run_at=%s", t.ScheduleRun, r.name(t.ID), t.State, r.offset(t.RunAt)))
	}
	return strings.Join(lines, "\n")
}

package cli

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold/internal/jsonkeys"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/wire"
)

func init() {
	register("submit", "submit a task: --user U --key K --payload JSON|@FILE --cost-budget N --steps-max N; or many: --batch FILE|-", runSubmit)
	register("status", "show a task: status TASK [--watch]", runStatus)
	register("list", "list tasks: list [--state S] [--user U] [--limit N] [--after CURSOR]", runList)
	register("cancel", "cancel a task (a running one stops before its next step): cancel TASK", runCancel)
}

// readPayload reads --payload: JSON, or @FILE. A key repeated in one
// object is refused here, naming its path (the payload's other rules are
// the queue's).
func readPayload(p string) (string, error) {
	file, ok := strings.CutPrefix(p, "@")
	if !ok {
		return p, checkKeys("--payload", []byte(p))
	}
	if file == "" {
		return "", badUsage("--payload: @ needs a file name")
	}
	st, err := os.Stat(file)
	if err != nil {
		return "", badUsage("--payload: %v", err)
	}
	if st.Size() > model.PayloadBytesMax {
		return "", badUsage("--payload: %s is larger than %d bytes", file, model.PayloadBytesMax)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", badUsage("--payload: %v", err)
	}
	return string(b), checkKeys("--payload", b)
}

// checkKeys refuses, as bad usage naming where it came from, a JSON
// document with a key repeated in one object (jsonkeys), naming the key's
// path and never a value. A malformed document passes: its refusal is the
// reader's.
func checkKeys(where string, doc []byte) error {
	var dup *jsonkeys.DuplicateError
	if errors.As(jsonkeys.Check(doc), &dup) {
		return badUsage("%s: %v", where, dup)
	}
	return nil
}

func runSubmit(e *env, args []string) int {
	fs := flag.NewFlagSet("submit", flag.ContinueOnError)
	c := commonFlags(fs, false)
	kindsFlag(fs, &c)
	user := fs.String("user", "", "user ID")
	key := fs.String("key", "", "idempotency key (unique per user)")
	kind := fs.String("kind", "", "the task's kind (default synthetic)")
	payload := fs.String("payload", "", "the task's payload: JSON, or @FILE")
	costBudget := fs.Int64("cost-budget", 0, "cost budget (default: the kind's in the kinds file, else required)")
	stepsMax := fs.Int("steps-max", 0, "step limit (default: the kind's in the kinds file, else required)")
	priority := fs.Int("priority", 0, "priority (higher first)")
	runAt := fs.String("run-at", "", "earliest start: RFC 3339 or +DURATION")
	deadline := fs.String("deadline", "", "deadline: RFC 3339 or +DURATION")
	batch := fs.String("batch", "", fmt.Sprintf("submit JSON lines of submit fields from FILE (- for standard input), all in one transaction, at most %d", queue.SubmitBatchMax))
	if err := parse(fs, args); err != nil {
		return fail(e, "submit", err)
	}
	if *batch != "" {
		if err := batchOnly(fs); err != nil {
			return fail(e, "submit", err)
		}
		return submitBatch(e, c, *batch)
	}
	body, err := readPayload(*payload)
	if err != nil {
		return fail(e, "submit", err)
	}
	req := model.SubmitRequest{User: *user, Key: *key, Kind: *kind, Payload: body, CostBudget: *costBudget, StepsMax: *stepsMax, Priority: *priority}
	if req.RunAt, err = parseTime("run-at", *runAt); err != nil {
		return fail(e, "submit", err)
	}
	if req.Deadline, err = parseTime("deadline", *deadline); err != nil {
		return fail(e, "submit", err)
	}
	if err := checkSubmit(c, req); err != nil {
		return fail(e, "submit", err)
	}
	q, err := openExisting(e.ctx, c)
	if err != nil {
		return fail(e, "submit", err)
	}
	defer q.Close()
	res, err := q.Submit(e.ctx, req)
	if err != nil {
		return fail(e, "submit", err)
	}
	if *c.json {
		printJSON(e.stdout, wire.SubmitResultOf(res))
		return exitOK
	}
	if res.Replay {
		fmt.Fprintf(e.stdout, "%s (replay: the task already existed)\n", res.TaskID)
		return exitOK
	}
	fmt.Fprintln(e.stdout, res.TaskID)
	return exitOK
}

// batchOnly refuses the single request's flags beside --batch.
func batchOnly(fs *flag.FlagSet) error {
	var single []string
	requestFlags := map[string]bool{"user": true, "key": true, "kind": true, "payload": true, "cost-budget": true,
		"steps-max": true, "priority": true, "run-at": true, "deadline": true}
	fs.Visit(func(f *flag.Flag) {
		if requestFlags[f.Name] {
			single = append(single, "--"+f.Name)
		}
	})
	if len(single) > 0 {
		return badUsage("--batch takes its requests from the file, not %s", strings.Join(single, ", "))
	}
	return nil
}

// checkSubmit validates a submit before anything is opened: the queue's
// own checks too, and the reserved key.
func checkSubmit(c common, req model.SubmitRequest) error {
	defaults, err := c.defaults()
	if err != nil {
		return err
	}
	n, err := model.NormalizeWith(req, defaults)
	if err == nil {
		err = model.CheckCallerKey(n.Key)
	}
	if err == nil {
		err = checkIntakePayload(c, n.Kind, n.Payload)
	}
	return err
}

// taskArg reads the one TASK argument after the flags.
func taskArg(fs *flag.FlagSet, args []string) (string, error) {
	if err := parseWithArgs(fs, args, 1); err != nil {
		return "", err
	}
	id := fs.Arg(0)
	if err := model.CheckTaskID(id); err != nil {
		return "", err
	}
	return id, nil
}

// checkScheduleID refuses what cannot be a schedule ID before it reaches a
// query.
func checkScheduleID(id string) error {
	err := model.CheckName("schedule", id)
	if err == nil {
		return nil
	}
	problem := err.Error()
	var v *model.ValidationError
	if errors.As(err, &v) {
		problem = v.Problem
	}
	return badUsage("schedule %q: not a schedule ID (%s)", id, problem)
}

func runStatus(e *env, args []string) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	c := commonFlags(fs, false)
	watch := fs.Bool("watch", false, "then print each change as it happens, until the task is terminal (or interrupted)")
	id, err := taskArg(fs, args)
	if err != nil {
		return fail(e, "status", err)
	}
	return withReader(e, "status", c, func(q *queue.Queue) error {
		// The last event's number before the record, so that a watch
		// misses no change made in between.
		last, err := q.LastEventSeq(e.ctx, id)
		if err != nil {
			return err
		}
		t, err := q.Task(e.ctx, id)
		if err != nil {
			return err
		}
		if *c.json {
			err = printJSON(e.stdout, wire.TaskOf(t))
		} else {
			printStatus(e.stdout, t)
		}
		if err != nil || !*watch {
			return err
		}
		return watchTask(e, q, t, last, *c.json)
	})
}

func runList(e *env, args []string) int {
	fs := flag.NewFlagSet("list", flag.ContinueOnError)
	c := commonFlags(fs, false)
	state := fs.String("state", "", "only tasks in this state")
	user := fs.String("user", "", "only this user's tasks")
	kind := fs.String("kind", "", "only tasks of this kind")
	limit := fs.Int("limit", model.ListLimitDefault, fmt.Sprintf("at most this many tasks (1 to %d)", model.ListLimitMax))
	after := fs.String("after", "", "continue after this cursor (the next a cut-short list printed)")
	if err := parse(fs, args); err != nil {
		return fail(e, "list", err)
	}
	f := queue.PageFilter{State: model.State(*state), User: *user, Kind: *kind, Limit: *limit}
	if *state != "" {
		if _, err := model.ParseState(*state); err != nil {
			return fail(e, "list", badUsage("--state: %v", err))
		}
	}
	if *user != "" {
		if err := model.CheckName("user", *user); err != nil {
			return fail(e, "list", err)
		}
	}
	if *kind != "" {
		if err := model.CheckKind("kind", *kind); err != nil {
			return fail(e, "list", err)
		}
	}
	if *limit < 1 || *limit > model.ListLimitMax {
		return fail(e, "list", badUsage("--limit: must be from 1 to %d, got %d", model.ListLimitMax, *limit))
	}
	if *after != "" {
		n, err := strconv.ParseInt(*after, 10, 64)
		if err != nil || n < 1 {
			return fail(e, "list", badUsage("--after: %q is not a cursor a list printed as next", *after))
		}
		f.After = n
	}
	return withReader(e, "list", c, func(q *queue.Queue) error {
		page, err := q.ListPage(e.ctx, f)
		if err != nil {
			return err
		}
		next := ""
		if page.Next != 0 {
			next = strconv.FormatInt(page.Next, 10)
		}
		if *c.json {
			return printJSON(e.stdout, wire.TaskPage{Tasks: wire.All(page.Tasks, wire.TaskOf), Next: next})
		}
		printTable(e.stdout, page.Tasks)
		if next != "" {
			fmt.Fprintf(e.stdout, "(cut short at %d tasks; more follow: list --after %s)\n", len(page.Tasks), next)
		}
		return nil
	})
}

func runCancel(e *env, args []string) int {
	fs := flag.NewFlagSet("cancel", flag.ContinueOnError)
	c := commonFlags(fs, true)
	id, err := taskArg(fs, args)
	if err == nil {
		err = model.CheckName("actor", *c.actor)
	}
	if err != nil {
		return fail(e, "cancel", err)
	}
	return withQueue(e, "cancel", c, func(q *queue.Queue) error {
		t, err := q.Cancel(e.ctx, id, *c.actor)
		if err != nil {
			return err
		}
		if *c.json {
			return printJSON(e.stdout, wire.TaskOf(t))
		}
		if t.State == model.Running {
			fmt.Fprintf(e.stdout, "task %s: cancellation requested by %s; its worker stops before the next step\n", t.ID, t.CancelledBy)
		} else {
			fmt.Fprintf(e.stdout, "task %s: %s by %s\n", t.ID, t.State, t.CancelledBy)
		}
		return nil
	})
}

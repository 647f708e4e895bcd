package cli

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/view"
	"github.com/leasehold/leasehold/httpapi"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/wire"
)

func init() {
	register("approve", "approve a task waiting at its gate: approve TASK --version V", runApprove)
	register("reject", "reject a task waiting at its gate: reject TASK --version V", runReject)
	register("requeue", "requeue a task from needs_review with a bounded grant: requeue TASK --grant-cost N --grant-steps N", runRequeue)
	register("resolve", "settle a task in needs_review: resolve TASK --as completed|failed|cancelled", runResolve)
	register("settle", "record what the provider says of an uncertain effect: settle OP --applied|--not-applied", runSettle)
	register("inspect", "show stuck and uncertain tasks: lease age, last heartbeat, attempts, effects without receipts", runInspect)
	register("events", "show a task's audit events: events TASK; follow them: events [TASK] --follow [--after SEQ]", runEvents)
	register("metrics", "print the queue's metrics", runMetrics)
}

// given reports whether the flag name was set on the command line.
func given(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// withQueue opens an existing database for one command that writes.
func withQueue(e *env, name string, c common, fn func(q *queue.Queue) error) int {
	q, err := openExisting(e.ctx, c)
	return runWith(e, name, printableDB(*c.db), q, err, fn)
}

// withReader opens an existing database read-only for one command that
// only reads.
func withReader(e *env, name string, c common, fn func(q *queue.Queue) error) int {
	q, err := openReader(e.ctx, c)
	return runWith(e, name, printableDB(*c.db), q, err, fn)
}

func runWith(e *env, name, path string, q *queue.Queue, err error, fn func(q *queue.Queue) error) int {
	if err != nil {
		return fail(e, name, err)
	}
	defer q.Close()
	if err := fn(q); err != nil {
		return fail(e, name, explainOpen(path, err))
	}
	return exitOK
}

func runApprove(e *env, args []string) int {
	return runGate(e, "approve", args, func(q *queue.Queue, id string, version int64, actor string) error {
		if err := q.Approve(e.ctx, id, version, actor); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "task %s approved by %s at version %d; it resumes from its checkpoint\n", id, actor, version)
		return nil
	})
}

// runReject rejects at the version given, as approve approves: the version
// the gate recorded, which shows that the rejecter saw this gate and not
// an earlier one the task has since passed (the API requires it too).
func runReject(e *env, args []string) int {
	return runGate(e, "reject", args, func(q *queue.Queue, id string, version int64, actor string) error {
		if err := q.Reject(e.ctx, id, version, actor); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "task %s rejected by %s at version %d\n", id, actor, version)
		return nil
	})
}

// runGate parses an approve or a reject, which both name the task and the
// version recorded when it paused (required: a stale one is refused), and
// hands them to decide.
func runGate(e *env, name string, args []string, decide func(q *queue.Queue, id string, version int64, actor string) error) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	c := commonFlags(fs, true)
	version := fs.Int64("version", 0, "the version recorded when the task paused (status shows it); required")
	id, err := taskArg(fs, args)
	switch {
	case err != nil:
	case !given(fs, "version"):
		err = badUsage("--version: required (the version status shows for the gate)")
	case *version < 0:
		err = badUsage("--version: must be 0 or more, got %d", *version)
	}
	if err == nil {
		err = model.CheckName("actor", *c.actor)
	}
	if err != nil {
		return fail(e, name, err)
	}
	return withQueue(e, name, c, func(q *queue.Queue) error {
		return decide(q, id, *version, *c.actor)
	})
}

func runRequeue(e *env, args []string) int {
	fs := flag.NewFlagSet("requeue", flag.ContinueOnError)
	c := commonFlags(fs, true)
	cost := fs.Int64("grant-cost", 0, "budget to add, 0 or more (bounded by the configured maximum); required")
	steps := fs.Int("grant-steps", 0, "steps to add, 0 or more (bounded by the configured maximum); required")
	id, err := taskArg(fs, args)
	switch {
	case err != nil:
	case !given(fs, "grant-cost") || !given(fs, "grant-steps"):
		err = badUsage("--grant-cost and --grant-steps: both required (0 grants nothing)")
	case *cost < 0:
		err = badUsage("--grant-cost: must be 0 or more, got %d", *cost)
	case *steps < 0:
		err = badUsage("--grant-steps: must be 0 or more, got %d", *steps)
	}
	if err == nil {
		err = model.CheckName("actor", *c.actor)
	}
	if err != nil {
		return fail(e, "requeue", err)
	}
	return withQueue(e, "requeue", c, func(q *queue.Queue) error {
		if err := q.Requeue(e.ctx, id, model.Grant{Cost: *cost, Steps: *steps}, *c.actor); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "task %s requeued by %s with a grant of cost %d and %d steps\n", id, *c.actor, *cost, *steps)
		return nil
	})
}

func runResolve(e *env, args []string) int {
	fs := flag.NewFlagSet("resolve", flag.ContinueOnError)
	c := commonFlags(fs, true)
	as := fs.String("as", "", "the state to settle it in: completed, failed or cancelled; required")
	id, err := taskArg(fs, args)
	if err == nil {
		err = model.CheckName("actor", *c.actor)
	}
	to := model.State(*as)
	switch {
	case err != nil:
	case *as == "":
		err = badUsage("--as: required: completed, failed or cancelled")
	case !to.Terminal():
		err = badUsage("--as: must be completed, failed or cancelled, got %s", model.Quote(*as, 64))
	}
	if err != nil {
		return fail(e, "resolve", err)
	}
	return withQueue(e, "resolve", c, func(q *queue.Queue) error {
		if err := q.Resolve(e.ctx, id, to, *c.actor); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "task %s resolved as %s by %s\n", id, to, *c.actor)
		return nil
	})
}

func runSettle(e *env, args []string) int {
	fs := flag.NewFlagSet("settle", flag.ContinueOnError)
	c := commonFlags(fs, true)
	applied := fs.Bool("applied", false, "the provider applied the operation: record a receipt so it is never called again")
	notApplied := fs.Bool("not-applied", false, "the provider did not apply it: remove the intent so the step makes it afresh")
	err := parseWithArgs(fs, args, 1)
	op := fs.Arg(0)
	if err == nil && *applied == *notApplied {
		err = badUsage("say exactly one of --applied and --not-applied")
	}
	if err == nil {
		err = model.CheckOperationID(op)
	}
	if err == nil {
		err = model.CheckName("actor", *c.actor)
	}
	if err != nil {
		return fail(e, "settle", err)
	}
	return withQueue(e, "settle", c, func(q *queue.Queue) error {
		if err := q.SettleEffect(e.ctx, op, *applied, *c.actor); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "operation %s recorded as applied=%t by %s\n", op, *applied, *c.actor)
		return nil
	})
}

func runEvents(e *env, args []string) int {
	fs := flag.NewFlagSet("events", flag.ContinueOnError)
	c := commonFlags(fs, false)
	followFlag := fs.Bool("follow", false, "then print each new event as it is written, until interrupted (without TASK: every task's)")
	after := fs.Int64("after", 0, "with --follow: start after this event sequence number")
	if err := parseWithArgs(fs, args, optionalArg); err != nil {
		return fail(e, "events", err)
	}
	id := fs.Arg(0)
	switch {
	case id == "" && !*followFlag:
		return fail(e, "events", badUsage("TASK argument required (usage: leasehold events TASK, or events [TASK] --follow)"))
	case id != "":
		if err := model.CheckTaskID(id); err != nil {
			return fail(e, "events", err)
		}
	}
	if given(fs, "after") && (!*followFlag || *after < 0) {
		return fail(e, "events", badUsage("--after: needs --follow and a sequence number of 0 or more, got %d", *after))
	}
	return withReader(e, "events", c, func(q *queue.Queue) error {
		var user, kind string // the task's, for its events' records
		if id != "" {
			t, err := q.Task(e.ctx, id)
			if err != nil {
				return err
			}
			user, kind = t.User, t.Kind
		}
		if *followFlag {
			return followEvents(e, q, id, *after, *c.json)
		}
		events, err := q.Events(e.ctx, id)
		if err != nil {
			return err
		}
		if *c.json {
			return printJSON(e.stdout, wire.All(events, func(ev model.Event) wire.Event { return wire.EventOf(ev, user, kind) }))
		}
		printEvents(e.stdout, events)
		return nil
	})
}

func runInspect(e *env, args []string) int {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	c := commonFlags(fs, false)
	if err := parse(fs, args); err != nil {
		return fail(e, "inspect", err)
	}
	return withReader(e, "inspect", c, func(q *queue.Queue) error {
		out, err := httpapi.Inspect(e.ctx, q, time.Now())
		if err != nil {
			return err
		}
		if *c.json {
			return printJSON(e.stdout, out)
		}
		if len(out) == 0 {
			fmt.Fprintln(e.stdout, "nothing stuck, parked or uncertain")
		}
		for _, in := range out {
			t := in.Task
			fmt.Fprintf(e.stdout, "%s %s user=%s attempts=%d/%d cost=%d/%d steps=%d/%d", t.ID, t.State, t.User,
				t.AttemptsCharged, t.AttemptsMax, t.CostUsed, t.CostBudget, t.StepsUsed, t.StepsMax)
			if t.Reason != "" {
				fmt.Fprintf(e.stdout, " reason=%s", t.Reason)
			}
			if t.Owner != "" {
				fmt.Fprintf(e.stdout, " owner=%s last_heartbeat=%s_ago lease_expired=%t", t.Owner, view.DurationMs(in.HeartbeatAgeMs), in.LeaseExpired)
			}
			if in.QueuedForMs > 0 {
				fmt.Fprintf(e.stdout, " queued_for=%s", view.DurationMs(in.QueuedForMs))
			}
			if len(in.Unreceipted) > 0 {
				fmt.Fprintf(e.stdout, " effects_without_receipt=%s", strings.Join(in.Unreceipted, ","))
			}
			fmt.Fprintf(e.stdout, "\n    -> %s\n", in.Advice)
		}
		return nil
	})
}

func runMetrics(e *env, args []string) int {
	fs := flag.NewFlagSet("metrics", flag.ContinueOnError)
	c := commonFlags(fs, false)
	c.kinds = fs.String("kinds", "", "a kinds file: its kinds and synthetic are counted by name, every other kind as other (without it, synthetic and other)")
	if err := parse(fs, args); err != nil {
		return fail(e, "metrics", err)
	}
	kindNames, err := c.kindNames()
	if err != nil {
		return fail(e, "metrics", err)
	}
	return withReader(e, "metrics", c, func(q *queue.Queue) error {
		m, err := q.Metrics(e.ctx)
		if err != nil {
			return err
		}
		if !m.Reconciles() {
			return errors.New("metrics do not reconcile: the depths by state and the tasks pruned do not add up to the tasks submitted")
		}
		if *c.json {
			return printJSON(e.stdout, view.MetricsOf(m, kindNames))
		}
		printMetrics(e, m, kindNames)
		return nil
	})
}

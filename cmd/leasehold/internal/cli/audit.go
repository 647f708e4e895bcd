package cli

import (
	"bufio"
	"flag"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/wire"
)

func init() {
	register("audit", "read the audit trail: audit [--task ID] [--actor NAME] [--since T] [--until T] [--format table|jsonl]", runAudit)
}

func runAudit(e *env, args []string) int {
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	c := commonFlags(fs, false)
	task := fs.String("task", "", "only this task's events")
	actor := fs.String("actor", "", "only this actor's events (a worker, a user, an operator, a token name, or reaper)")
	since := fs.String("since", "", "from this time on: RFC 3339 or +DURATION (negative durations look back: use RFC 3339)")
	until := fs.String("until", "", "before this time: RFC 3339")
	format := fs.String("format", "table", "table or jsonl")
	limit := fs.Int("limit", model.ListLimitMax, "at most this many events")
	if err := parse(fs, args); err != nil {
		return fail(e, "audit", err)
	}
	f := queue.AuditFilter{TaskID: *task, Actor: *actor, Limit: *limit}
	var err error
	switch {
	case *task != "" && model.CheckTaskID(*task) != nil:
		err = model.CheckTaskID(*task)
	case *actor != "" && model.CheckName("actor", *actor) != nil:
		err = model.CheckName("actor", *actor)
	case *format != "table" && *format != "jsonl":
		err = badUsage("--format: must be table or jsonl, got %q", *format)
	case *limit < 1 || *limit > model.ListLimitMax:
		err = badUsage("--limit: must be between 1 and %d, got %d", model.ListLimitMax, *limit)
	}
	if err == nil {
		f.Since, err = parseTime("since", *since)
	}
	if err == nil {
		f.Until, err = parseTime("until", *until)
	}
	if err == nil && !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		err = badUsage("--until: must be after --since")
	}
	if err != nil {
		return fail(e, "audit", err)
	}
	return withReader(e, "audit", c, func(q *queue.Queue) error {
		events, err := q.Audit(e.ctx, f)
		if err != nil {
			return err
		}
		if *format == "jsonl" || *c.json {
			w := bufio.NewWriter(e.stdout)
			for _, ev := range events {
				if err := printJSON(w, wire.EventOf(ev, "", "")); err != nil {
					return err
				}
			}
			return w.Flush()
		}
		printEvents(e.stdout, events)
		return nil
	})
}

package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/wire"
)

// followBatchMax bounds the events one read of a follow prints.
const followBatchMax = 500

// watchTask prints each change of t after event last as it happens
// (status --watch; last was read before t): the
// task's new events, then its state, until it is terminal or the command
// is interrupted. It reads the database (another process writes it), so
// it sees a change within queue.WaitPollInterval.
func watchTask(e *env, q *queue.Queue, t model.Task, last int64, asJSON bool) error {
	for !t.State.Terminal() {
		events, err := q.WaitEvents(e.ctx, queue.EventFilter{TaskID: t.ID, After: last, Limit: followBatchMax})
		if err != nil {
			return interrupted(e.ctx, err)
		}
		last = events[len(events)-1].Seq
		if t, err = q.Task(e.ctx, t.ID); err != nil {
			return err
		}
		if asJSON {
			if err := printJSON(e.stdout, wire.TaskOf(t)); err != nil {
				return err
			}
			continue
		}
		printEvents(e.stdout, trailEvents(events))
		fmt.Fprintf(e.stdout, "  now %s (reason %s), version %d, %d of %d spent, %d of %d steps\n", t.State,
			dash(string(t.Reason)), t.Version, t.CostUsed, t.CostBudget, t.StepsUsed, t.StepsMax)
	}
	return nil
}

// followEvents prints the audit trail (one task's, or every task's when
// id is "") after the sequence number after as it is written (events
// --follow), until the command is interrupted. With asJSON each event is
// one JSON line.
func followEvents(e *env, q *queue.Queue, id string, after int64, asJSON bool) error {
	for {
		events, err := q.WaitEvents(e.ctx, queue.EventFilter{TaskID: id, After: after, Limit: followBatchMax})
		if err != nil {
			return interrupted(e.ctx, err)
		}
		for _, ev := range events {
			if asJSON {
				if err := printJSON(e.stdout, wire.EventOf(ev.Event, ev.User, ev.TaskKind)); err != nil {
					return err
				}
			}
		}
		if !asJSON {
			printEvents(e.stdout, trailEvents(events))
		}
		after = events[len(events)-1].Seq
	}
}

// interrupted is nil when err is the command's context ending (an
// interrupt ends a watch normally), else err.
func interrupted(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil
	}
	return err
}

func trailEvents(events []queue.TrailEvent) []model.Event {
	out := make([]model.Event, len(events))
	for i, e := range events {
		out[i] = e.Event
	}
	return out
}

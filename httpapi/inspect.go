package httpapi

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/wire"
)

// InspectReader is what the inspect report reads of the queue
// (*queue.Queue is one).
type InspectReader interface {
	List(ctx context.Context, f model.ListFilter) ([]model.Task, error)
	Effects(ctx context.Context, taskID string) ([]model.Effect, error)
}

// Inspect is the inspect report at now (GET /v1/inspect, and leasehold
// inspect): the running tasks whose lease expired or whose effect is in
// flight, the parked ones, and the due ones waiting too long, each with
// advice. Never nil, so it encodes as [].
func Inspect(ctx context.Context, q InspectReader, now time.Time) ([]wire.Inspection, error) {
	out := []wire.Inspection{}
	for _, state := range []model.State{model.Running, model.NeedsReview, model.WaitingForApproval, model.Queued} {
		tasks, err := q.List(ctx, model.ListFilter{State: state, Limit: model.ListLimitMax})
		if err != nil {
			return nil, err
		}
		for _, t := range tasks {
			in, show, err := inspectTask(ctx, q, t, now)
			if err != nil {
				return nil, err
			}
			if show {
				out = append(out, in)
			}
		}
	}
	return out, nil
}

// pendingTooLong is how long a due task may wait before inspect shows it.
const pendingTooLong = 30 * time.Second

// inspectTask decides whether a task needs an operator's eye and what to
// suggest.
func inspectTask(ctx context.Context, q InspectReader, t model.Task, now time.Time) (wire.Inspection, bool, error) {
	in := wire.Inspection{Task: wire.TaskOf(t)}
	effects, err := q.Effects(ctx, t.ID)
	if err != nil {
		return in, false, err
	}
	for _, ef := range effects {
		if !ef.Receipted() {
			in.Unreceipted = append(in.Unreceipted, ef.OpID)
		}
	}
	sort.Strings(in.Unreceipted)
	switch t.State {
	case model.Running:
		in.LeaseAgeMs = now.Sub(t.ClaimedAt).Milliseconds()
		in.HeartbeatAgeMs = now.Sub(t.HeartbeatAt).Milliseconds()
		in.LeaseExpired = !now.Before(t.LeaseUntil)
		if !in.LeaseExpired && len(in.Unreceipted) == 0 {
			return in, false, nil
		}
		in.Advice = "lease expired: the reaper (any running worker) requeues it and charges an attempt; check the worker named as owner"
		if !in.LeaseExpired {
			in.Advice = "effect in flight: its worker records the receipt or the next claim reconciles it"
		}
	case model.NeedsReview:
		switch {
		case t.Reason == model.UncertainEffect || len(in.Unreceipted) > 0:
			in.Advice = fmt.Sprintf("ask the provider about %s, then: leasehold settle OP --applied (or --not-applied), then leasehold requeue %s --grant-cost 0 --grant-steps 0",
				strings.Join(in.Unreceipted, ","), t.ID)
		default:
			in.Advice = fmt.Sprintf("read leasehold events %s; if the cause is fixed: leasehold requeue %s --grant-cost 0 --grant-steps 0; otherwise leasehold resolve %s --as failed",
				t.ID, t.ID, t.ID)
		}
	case model.WaitingForApproval:
		in.Advice = fmt.Sprintf("waiting for approval at gate %s: leasehold approve %s --version %d (or reject)", t.ApprovalGate, t.ID, t.ApprovalVersion)
	case model.Queued:
		due := t.QueuedAt
		if t.RunAt.After(due) {
			due = t.RunAt
		}
		if now.Before(due) || now.Sub(due) < pendingTooLong {
			return in, false, nil
		}
		in.QueuedForMs = now.Sub(due).Milliseconds()
		in.Advice = fmt.Sprintf("due but not claimed: check that workers run (leasehold metrics) and the per-user limit of %s (leasehold limits)", t.User)
	}
	return in, true, nil
}

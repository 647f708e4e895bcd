package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold/model"
)

// caller submits the workload, cancels the tasks planned for it and
// approves or rejects every task that waits at its gate, through each
// lane's queue (the Go API: no child process, no printed output).
type caller struct {
	r    *run
	plan []plannedTask

	mu        sync.Mutex // guards the fields below
	next      int        // the next task of plan to submit
	ids       []string   // plan index -> task ID ("" until accepted)
	submitted []time.Time
	cancelled []bool
	byID      map[string]int       // task ID -> plan index
	waiting   map[string]time.Time // task ID -> when first seen waiting at its gate
	gaveUp    int                  // tasks whose submit failed every retry
}

func newCaller(r *run, plan []plannedTask) *caller {
	return &caller{r: r, plan: plan, ids: make([]string, len(plan)), submitted: make([]time.Time, len(plan)),
		cancelled: make([]bool, len(plan)), byID: map[string]int{}, waiting: map[string]time.Time{}}
}

// finished reports whether every task of the plan has been submitted (or
// given up on, which the counts then show).
func (c *caller) finished() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.next == len(c.plan)
}

// loop acts every tick until ctx ends.
func (c *caller) loop(ctx context.Context) {
	for {
		c.submitDue(ctx)
		c.cancelDue(ctx)
		c.decide(ctx)
		if sleep(ctx, callerTick) != nil {
			return
		}
	}
}

func (c *caller) submitDue(ctx context.Context) {
	progress := c.r.progress()
	for {
		c.mu.Lock()
		i := c.next
		c.mu.Unlock()
		if i == len(c.plan) || (c.plan[i].SubmitAfter > 0 && c.plan[i].SubmitAfter > progress) {
			return
		}
		id, err := c.submit(ctx, c.plan[i])
		c.mu.Lock()
		c.next++
		if err != nil {
			c.gaveUp++
		} else {
			c.ids[i], c.submitted[i], c.byID[id] = id, time.Now(), i
		}
		c.mu.Unlock()
		if err != nil {
			c.r.moment(c.r.lanes[c.plan[i].Lane].kind, "", MomentMiss, fmt.Sprintf("submit %s failed: %v", c.plan[i].Key, err))
		}
	}
}

// submit submits one task, retrying a failed submit under the same key:
// an exact replay returns the task a submit whose outcome was unknown
// stored, so nothing is submitted twice.
func (c *caller) submit(ctx context.Context, t plannedTask) (string, error) {
	l := c.r.lanes[t.Lane]
	req := model.SubmitRequest{User: t.User, Key: t.Key, Payload: t.Payload, CostBudget: t.CostBudget, StepsMax: t.StepsMax}
	var err error
	for attempt := 0; attempt < submitRetries; attempt++ {
		var res model.SubmitResult
		res, err = l.q.Submit(model.WithScope(ctx, model.ScopeSubmit), req)
		if err == nil {
			if l.accept(res.TaskID) {
				c.r.count(func(c *Counts) { c.Tasks++ })
			}
			return res.TaskID, nil
		}
		if errors.Is(err, model.ErrInvalidInput) || ctx.Err() != nil {
			break
		}
		if sleep(ctx, 200*time.Millisecond) != nil {
			break
		}
	}
	return "", fmt.Errorf("submit %s: %w", t.Key, err)
}

// cancelDue cancels each task planned for cancellation once its time has
// come, whatever state it is in (a task that has ended refuses).
func (c *caller) cancelDue(ctx context.Context) {
	for i, t := range c.plan {
		c.mu.Lock()
		id, at, done := c.ids[i], c.submitted[i], c.cancelled[i]
		c.mu.Unlock()
		if t.CancelAfter <= 0 || id == "" || done || time.Since(at) < t.CancelAfter {
			continue
		}
		l := c.r.lanes[t.Lane]
		task, err := l.q.Cancel(model.WithScope(ctx, model.ScopeSubmit), id, callerActor)
		if err != nil && !errors.Is(err, model.ErrInvalidTransition) {
			continue // storage busy under an aimed hold: try again next tick
		}
		c.mu.Lock()
		c.cancelled[i] = true
		c.mu.Unlock()
		if err == nil {
			c.r.count(func(c *Counts) { c.Cancels++ })
			c.r.moment(l.kind, "", MomentCancel, fmt.Sprintf("caller cancelled %s (%s, now %s)", id, t.Shape, task.State))
		}
	}
}

// decide approves or rejects every task waiting at its gate once it has
// waited the time its plan says.
func (c *caller) decide(ctx context.Context) {
	for _, l := range c.r.lanes {
		waiting, err := l.q.List(ctx, model.ListFilter{State: model.WaitingForApproval, Limit: model.ListLimitMax})
		if err != nil {
			continue
		}
		for _, task := range waiting {
			c.mu.Lock()
			i, known := c.byID[task.ID]
			first, seen := c.waiting[task.ID]
			if !seen {
				first = time.Now()
				c.waiting[task.ID] = first
			}
			c.mu.Unlock()
			if !known || time.Since(first) < c.plan[i].ApproveAfter {
				continue
			}
			c.approve(ctx, l, task, c.plan[i].Reject)
		}
	}
}

func (c *caller) approve(ctx context.Context, l *lane, task model.Task, reject bool) {
	scoped := model.WithScope(ctx, model.ScopeApprove)
	if reject {
		if err := l.q.Reject(scoped, task.ID, task.ApprovalVersion, callerActor); err == nil {
			c.r.count(func(c *Counts) { c.Rejections++ })
			c.r.moment(l.kind, "", MomentDecide, fmt.Sprintf("caller rejected %s at its gate", task.ID))
		}
		return
	}
	if err := l.q.Approve(scoped, task.ID, task.ApprovalVersion, callerActor); err == nil {
		c.r.count(func(c *Counts) { c.Approvals++ })
		c.r.moment(l.kind, "", MomentDecide, fmt.Sprintf("caller approved %s naming version %d", task.ID, task.ApprovalVersion))
	}
}

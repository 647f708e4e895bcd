package worker

import (
	"log/slog"
	"time"

	"github.com/leasehold/leasehold/model"
)

// Claiming ahead (Config.ClaimAhead). A live Runner's slot over a queue
// that can complete several claims in one write (EachCompleteClaimer)
// runs a lane of tasks: the task it runs, up to ClaimAhead tasks claimed
// ahead of it, and the tasks it ran whose completions it holds. A slot
// whose task's steps are all done holds its completion while a task
// claimed ahead waits, and runs that one next; the slot that finds none
// waiting (or the lane full) completes its own task and every held one
// in one write, each completion claiming the next task, so that a write
// completes and claims up to 1 + ClaimAhead tasks a slot. Handlers still
// run one at a time a slot.
//
// Every task of a lane stays leased and fenced as any claim: a task
// claimed ahead waits at most a heartbeat interval from its claim, and a
// held completion is written no later than its task's next heartbeat was
// due (lane.due); when either would pass (the task under way runs long),
// the lane is flushed: the held completions are written one by one, and
// the tasks waiting are released to the queue (no attempt charged). A
// shutdown flushes the lane at once; a slot whose task ends otherwise
// (failed, paused, released, its claim lost) writes the held completions
// one by one. A held completion the queue refuses is reported as that
// task's, as a Complete's refusal would be.

// Bounds of Config.ClaimAhead. DefaultClaimAhead is what docs/PERF.md
// measured best with ten slots a process (more ran no faster, and four
// processes' lanes of 8 passed the bench's per-user running limit).
const (
	DefaultClaimAhead = 3
	ClaimAheadMax     = 15
)

// lane is one slot goroutine's tasks claimed ahead and completions held.
type lane struct {
	ahead []aheadClaim
	held  []*Slot
}

// aheadClaim is a task claimed ahead, and when the lane took it.
type aheadClaim struct {
	c  model.Claimed
	at time.Time
}

// pending reports whether the lane holds anything besides the task under
// way.
func (l *lane) pending() bool { return l != nil && (len(l.ahead) > 0 || len(l.held) > 0) }

// due is when the lane must be flushed: a heartbeat interval after its
// oldest task claimed ahead was taken, or when the first held task's
// heartbeat was due, whichever is first.
func (l *lane) due(heartbeat time.Duration) time.Time {
	var at time.Time
	earlier := func(t time.Time) {
		if at.IsZero() || t.Before(at) {
			at = t
		}
	}
	for _, a := range l.ahead {
		earlier(a.at.Add(heartbeat))
	}
	for _, h := range l.held {
		earlier(h.heartbeatDue)
	}
	return at
}

// take adds claimed to the lane's tasks waiting, held by the runner.
func (r *Runner) take(l *lane, claimed []model.Claimed) {
	if len(claimed) == 0 {
		return
	}
	now := r.cfg.Clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range claimed {
		l.ahead = append(l.ahead, aheadClaim{c: c, at: now})
		if !r.gaveUp {
			r.held[c.Claim.TaskID] = c.Claim
		} else {
			r.left = append(r.left, LeftClaim{Claim: c.Claim, Why: "claimed as the shutdown grace ended"})
		}
	}
}

// holds is the hold of a slot of lane l: its completion waits while a
// task claimed ahead waits, the lane has room, no shutdown has begun and
// the lane is not due.
func (r *Runner) holds(l *lane) bool {
	if len(l.ahead) == 0 || len(l.held) >= r.cfg.ClaimAhead {
		return false
	}
	r.mu.Lock()
	draining := r.draining
	r.mu.Unlock()
	return !draining && r.cfg.Clock.Now().Before(l.due(r.cfg.Heartbeat))
}

// hold records slot s as holding its completion in lane l: it spends no
// more budget, and its claim stays held.
func (r *Runner) hold(l *lane, s *Slot) {
	l.held = append(l.held, s)
	r.mu.Lock()
	delete(r.exposure, s)
	delete(r.hbFailing, s)
	r.mu.Unlock()
}

// settleHeld answers lane l's held completions once slot s, which was to
// write them with its own, has ended: each that s's write carried is
// reported with its outcome (and run again alone after a storage error);
// each it did not carry (s ended otherwise) is written alone now.
func (r *Runner) settleHeld(l *lane, s *Slot, drain, abandon <-chan struct{}) {
	now := r.cfg.Clock.Now()
	for i, h := range l.held {
		if i >= len(s.withErrs) {
			r.finishAlone(h, drain, abandon)
			continue
		}
		rep := h.report(ActionComplete)
		rep.Write = model.WriteComplete
		if h.outcome(&rep, s.withErrs[i], now) {
			rep.Outcome = "completed"
			h.log(slog.LevelInfo, "task completed", rep)
		}
		if rep.StorageError {
			r.finishAlone(h, drain, abandon)
			continue
		}
		r.report(rep)
		r.release(h)
	}
	l.held, s.withErrs = nil, nil
}

// finishAlone writes held slot h's completion as a write of its own,
// stepping it as any slot (backing off after storage errors), and then
// lets its claim go.
func (r *Runner) finishAlone(h *Slot, drain, abandon <-chan struct{}) {
	h.holding, h.hold, h.refill, h.with, h.phase = false, nil, nil, nil, phaseNext
	h.retryAt = time.Time{}
	r.drive(h, drain, abandon, nil)
	r.release(h)
}

// release lets the claim of h, whose run is over, go from those the
// runner holds.
func (r *Runner) release(h *Slot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.draining && !r.gaveUp && h.Left() != "" {
		r.left = append(r.left, LeftClaim{Claim: h.claim, Why: h.Left()})
	}
	delete(r.held, h.claim.TaskID)
}

// flush empties lane l: its held completions written one by one, its
// tasks waiting released to the queue.
func (r *Runner) flush(l *lane, drain, abandon <-chan struct{}) {
	held, ahead := l.held, l.ahead
	l.held, l.ahead = nil, nil
	for _, h := range held {
		r.finishAlone(h, drain, abandon)
	}
	for _, a := range ahead {
		s := newSlot(r.cfg, a.c, r.cfg.Clock.Now())
		s.phase = phaseRelease
		r.drive(s, drain, abandon, nil)
		r.release(s)
	}
}

// nextOf takes the next task waiting in lane l.
func (l *lane) nextOf() model.Claimed {
	c := l.ahead[0].c
	l.ahead = l.ahead[1:]
	return c
}

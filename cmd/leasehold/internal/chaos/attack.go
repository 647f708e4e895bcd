package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" driver, for the queue lock and the integrity check

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/worker"
)

const syscallCont = syscall.SIGCONT

// Attack bounds.
const (
	aimWaitMax    = 4 * time.Second        // how long the ledger is held waiting for a worker to call
	appliedMax    = 3 * time.Second        // how long the queue is held waiting for the call to apply
	aimPoll       = 25 * time.Millisecond  // how often a hold looks for its target
	restartMin    = 100 * time.Millisecond // a killed worker is restarted after restartMin..restartMax
	restartMax    = 800 * time.Millisecond
	pauseMin      = 200 * time.Millisecond // between attacks
	pauseMax      = 1000 * time.Millisecond
	ownerBias     = 4 // of 5 random kills and stops pick a worker holding a claim
	stopOvershoot = 500 * time.Millisecond
	// aimBudget bounds the time the attacks may spend aiming: past it, an
	// aimed kill or stop is made at random instead (and counted as a miss),
	// so that a full run stays within its three minutes.
	aimBudget = 90 * time.Second
)

// attack kinds in the plan.
const (
	attackKill = "kill"
	attackAim  = "aim"
	attackStop = "stop"
)

// attack runs the attack plan: the random kills, the aimed kills (lanes in
// turn, before and after the service applies, alternately per lane) and
// the stops, in an order drawn from rng, with a pause drawn between each.
// The caller paces its submits by the share of the plan done.
func (r *run) attack(ctx context.Context, rng *rand.Rand) error {
	var plan []string
	for i := 0; i < r.cfg.Kills-r.cfg.Aimed; i++ {
		plan = append(plan, attackKill)
	}
	for i := 0; i < r.cfg.Aimed; i++ {
		plan = append(plan, attackAim)
	}
	for i := 0; i < r.cfg.Stops; i++ {
		plan = append(plan, attackStop)
	}
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	r.attacksPlanned.Store(int64(len(plan)))
	if err := sleep(ctx, firstAttackWait); err != nil {
		return err
	}
	aimed, stops := 0, 0
	started := time.Now()
	aiming := func() bool {
		if time.Since(started) < aimBudget {
			return true
		}
		r.count(func(c *Counts) { c.AimMissed++ })
		return false
	}
	for _, a := range plan {
		var err error
		switch a {
		case attackKill:
			err = r.randomKill(ctx, rng, "random")
		case attackAim:
			// Lanes take turns; modes alternate, and each lane gets both.
			afterApply := (aimed+aimed/len(r.lanes))%2 == 1
			preferred := aimed % len(r.lanes)
			aimed++
			if !aiming() {
				err = r.randomKill(ctx, rng, "instead of an aimed kill: the aiming time is spent")
				break
			}
			l, lerr := r.aimLane(ctx, preferred)
			if err = lerr; err == nil {
				err = r.aimedKill(ctx, rng, l, afterApply)
			}
		case attackStop:
			err = r.stop(ctx, rng, stops%2 == 1 && aiming())
			stops++
		}
		if err != nil {
			return fmt.Errorf("%s: %w", a, err)
		}
		r.attacksDone.Add(1)
		if err := sleep(ctx, between(rng, pauseMin, pauseMax)); err != nil {
			return err
		}
	}
	return nil
}

func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// target picks a live, running worker: usually one that holds a claim, so
// that the attack lands mid-task.
func (r *run) target(ctx context.Context, rng *rand.Rand) (*proc, error) {
	var owners, all []*proc
	for _, l := range r.lanes {
		running, err := l.q.List(ctx, model.ListFilter{State: model.Running, Limit: model.ListLimitMax})
		if err != nil {
			return nil, fmt.Errorf("lane %s: %w", l.kind, err)
		}
		holds := map[string]bool{}
		for _, t := range running {
			holds[t.Owner] = true
		}
		for _, p := range l.procs {
			if !p.alive() {
				continue
			}
			p.mu.Lock()
			stopped := p.stopped
			p.mu.Unlock()
			if stopped {
				continue
			}
			all = append(all, p)
			if holds[p.name] {
				owners = append(owners, p)
			}
		}
	}
	if len(owners) > 0 && rng.IntN(5) < ownerBias {
		return owners[rng.IntN(len(owners))], nil
	}
	if len(all) == 0 {
		return nil, errNoWorker
	}
	return all[rng.IntN(len(all))], nil
}

// randomKill SIGKILLs a worker and restarts it after a short pause.
func (r *run) randomKill(ctx context.Context, rng *rand.Rand, why string) error {
	p, err := r.target(ctx, rng)
	if err != nil {
		return err
	}
	if err := p.kill(MomentKill, why); err != nil {
		return err
	}
	r.count(func(c *Counts) { c.Kills++ })
	return r.restart(ctx, rng, p)
}

func (r *run) restart(ctx context.Context, rng *rand.Rand, p *proc) error {
	if err := sleep(ctx, between(rng, restartMin, restartMax)); err != nil {
		return err
	}
	r.count(func(c *Counts) { c.Restarts++ })
	return p.start()
}

// stop freezes a worker with SIGSTOP past its lease, then lets it
// continue (see freeze). Every other stop is aimed: the worker is frozen
// while it waits inside a service call, so that once continued it calls
// late, under a fence a newer claim has replaced. An aim that finds no
// call freezes a random worker instead.
func (r *run) stop(ctx context.Context, rng *rand.Rand, aimed bool) error {
	if aimed {
		done, err := r.aimedStop(ctx, rng)
		if err != nil || done {
			return err
		}
	}
	p, err := r.target(ctx, rng)
	if err != nil {
		return err
	}
	return r.freeze(ctx, p, nil, "", "")
}

// aimedStop freezes a worker inside its call; done is false when no worker
// called in time.
func (r *run) aimedStop(ctx context.Context, rng *rand.Rand) (done bool, err error) {
	l, err := r.aimLane(ctx, rng.IntN(len(r.lanes)))
	if err != nil {
		return false, err
	}
	release, err := l.svc.Hold(ctx)
	if err != nil {
		return false, err
	}
	defer release()
	r.moment(l.kind, "", MomentHold, "holding the ledger's lock, waiting for a worker inside a call to freeze")
	target, found, err := l.waitInCall(ctx)
	if err != nil {
		return false, err
	}
	if !found {
		release()
		r.moment(l.kind, "", MomentMiss, fmt.Sprintf("no worker called within %s; a random stop instead", aimWaitMax))
		r.count(func(c *Counts) { c.AimMissed++ })
		return false, nil
	}
	what := fmt.Sprintf("inside its call for %s (task %s, fence %d)", target.opID, target.taskID, target.fence)
	return true, r.freeze(ctx, target.worker, release, what, target.taskID)
}

// freeze sends SIGSTOP, runs thaw (if any: an aimed stop releases the
// ledger there), waits until the worker's claims' leases have expired and
// every one of them has moved on (reaped, claimed again, or ended) and,
// when reclaim names a task, until that task has been claimed again or has
// ended, or until a bound; then it sends SIGCONT: whatever the worker does
// next is late.
func (r *run) freeze(ctx context.Context, p *proc, thaw func() error, what, reclaim string) error {
	held, err := p.lane.claimsOf(ctx, p.name)
	if err != nil {
		return err
	}
	if err := p.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	detail := fmt.Sprintf("SIGSTOP worker %s holding %d claims", p.name, len(held))
	if what != "" {
		detail += ", " + what
	}
	r.moment(p.lane.kind, p.name, MomentStop, detail)
	if thaw != nil {
		if err := thaw(); err != nil {
			return err
		}
		r.moment(p.lane.kind, "", MomentRelease, "released the ledger's lock")
	}
	stoppedAt := time.Now()
	bound := 3*r.cfg.Lease + 2*time.Second
	for {
		moved, err := p.lane.claimsMoved(ctx, held)
		if err != nil {
			return err
		}
		if fence, ok := held[reclaim]; ok && moved {
			t, err := p.lane.q.Task(ctx, reclaim)
			if err != nil {
				return fmt.Errorf("lane %s: %w", p.lane.kind, err)
			}
			moved = t.Version > fence || settled(t.State)
		}
		past := time.Since(stoppedAt) > r.cfg.Lease+stopOvershoot
		if (moved && past) || time.Since(stoppedAt) > bound {
			break
		}
		if err := sleep(ctx, aimPoll*4); err != nil {
			return err
		}
	}
	if err := p.signal(syscall.SIGCONT); err != nil {
		return err
	}
	frozen := time.Since(stoppedAt)
	r.moment(p.lane.kind, p.name, MomentCont, fmt.Sprintf("SIGCONT worker %s after %d ms frozen", p.name, frozen.Milliseconds()))
	r.count(func(c *Counts) {
		c.Stops++
		if frozen > r.cfg.Lease {
			c.StopsPast++
		}
		if what != "" {
			c.StopsAimed++
		}
	})
	return nil
}

// claimsOf returns the fence of every task the worker holds.
func (l *lane) claimsOf(ctx context.Context, name string) (map[string]int64, error) {
	running, err := l.q.List(ctx, model.ListFilter{State: model.Running, Limit: model.ListLimitMax})
	if err != nil {
		return nil, fmt.Errorf("lane %s: %w", l.kind, err)
	}
	held := map[string]int64{}
	for _, t := range running {
		if t.Owner == name {
			held[t.ID] = t.Version
		}
	}
	return held, nil
}

// claimsMoved reports whether none of held is still running under its fence.
func (l *lane) claimsMoved(ctx context.Context, held map[string]int64) (bool, error) {
	for id, fence := range held {
		t, err := l.q.Task(ctx, id)
		if err != nil {
			return false, fmt.Errorf("lane %s: %w", l.kind, err)
		}
		if t.State == model.Running && t.Version == fence {
			return false, nil
		}
	}
	return true, nil
}

// inCall is a worker waiting inside a service call: its task is running
// under the fence its effect's intent was recorded with, there is no
// receipt, and the service has not applied the operation.
type inCall struct {
	worker *proc
	taskID string
	opID   string
	fence  int64
}

// aimedKill kills a worker between an effect's intent and its receipt. It
// holds the lane's ledger lock, so every call waits inside the service,
// until a worker is seen waiting there. Before the service applies: that
// worker is killed while it waits, then the lock is released. After: the
// queue's write lock is taken too and the ledger's released, so the call
// applies and the receipt cannot be written; once the ledger shows the
// application the worker is killed, then the queue released. A hold that
// finds no worker calling within aimWaitMax makes a random kill instead,
// so the kills stay as many as configured.
func (r *run) aimedKill(ctx context.Context, rng *rand.Rand, l *lane, afterApply bool) error {
	release, err := l.svc.Hold(ctx)
	if err != nil {
		return err
	}
	defer release()
	r.moment(l.kind, "", MomentHold, "holding the ledger's lock, waiting for a worker inside a call")
	target, found, err := l.waitInCall(ctx)
	if err != nil {
		return err
	}
	if !found {
		release()
		r.moment(l.kind, "", MomentMiss, fmt.Sprintf("no worker called within %s; a random kill instead", aimWaitMax))
		r.count(func(c *Counts) { c.AimMissed++ })
		return r.randomKill(ctx, rng, "instead of an aimed kill that found no call")
	}
	what := fmt.Sprintf("between intent and receipt of %s (task %s, fence %d)", target.opID, target.taskID, target.fence)
	if !afterApply {
		if err := target.worker.kill(MomentAimed, what+": waiting inside the call, not applied"); err != nil {
			return err
		}
		release()
		r.moment(l.kind, "", MomentRelease, "released the ledger's lock")
		r.count(func(c *Counts) { c.Kills++; c.AimedBefore++ })
		return r.restart(ctx, rng, target.worker)
	}
	unlock, err := l.holdQueue(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	release()
	r.moment(l.kind, "", MomentHold, "holding the queue's lock, released the ledger's: the call applies, its receipt waits")
	applied, err := l.waitApplied(ctx, target.opID)
	if err != nil {
		return err
	}
	state := "applied, receipt not recorded"
	if !applied {
		state = fmt.Sprintf("not applied within %s", appliedMax)
	}
	if err := target.worker.kill(MomentAimed, what+": "+state); err != nil {
		return err
	}
	unlock()
	r.moment(l.kind, "", MomentRelease, "released the queue's lock")
	r.count(func(c *Counts) {
		c.Kills++
		if applied {
			c.AimedAfter++
		} else {
			c.AimedBefore++
		}
	})
	return r.restart(ctx, rng, target.worker)
}

// aimLane picks the lane to aim at: the preferred one (lanes take turns)
// or, failing it, the next that has a running task with an effect in its
// next two steps, waiting up to aimWaitMax for one to appear. With none, it
// returns the preferred lane, where the aim will most likely miss.
func (r *run) aimLane(ctx context.Context, preferred int) (*lane, error) {
	deadline := time.Now().Add(aimWaitMax)
	for {
		for i := range r.lanes {
			l := r.lanes[(preferred+i)%len(r.lanes)]
			ok, err := l.effectAhead(ctx)
			if err != nil {
				return nil, err
			}
			if ok {
				return l, nil
			}
		}
		if time.Now().After(deadline) {
			return r.lanes[preferred], nil
		}
		if err := sleep(ctx, aimPoll*4); err != nil {
			return nil, err
		}
	}
}

// effectAhead reports whether a live worker of the lane runs a task whose
// next step or the one after makes an effect.
func (l *lane) effectAhead(ctx context.Context) (bool, error) {
	running, err := l.q.List(ctx, model.ListFilter{State: model.Running, Limit: model.ListLimitMax})
	if err != nil {
		return false, fmt.Errorf("lane %s: %w", l.kind, err)
	}
	for _, t := range running {
		if p := l.proc(t.Owner); p == nil || !p.alive() {
			continue
		}
		steps, err := worker.ParseSynthetic(t.Payload)
		if err != nil {
			continue
		}
		for i := t.StepsUsed; i < min(len(steps), t.StepsUsed+2); i++ {
			if steps[i].Effect != "" {
				return true, nil
			}
		}
	}
	return false, nil
}

// waitInCall looks for a worker waiting inside a call, up to aimWaitMax.
func (l *lane) waitInCall(ctx context.Context) (inCall, bool, error) {
	deadline := time.Now().Add(aimWaitMax)
	for time.Now().Before(deadline) {
		c, ok, err := l.findInCall(ctx)
		if err != nil || ok {
			return c, ok, err
		}
		if err := sleep(ctx, aimPoll); err != nil {
			return inCall{}, false, err
		}
	}
	return inCall{}, false, nil
}

func (l *lane) findInCall(ctx context.Context) (inCall, bool, error) {
	running, err := l.q.List(ctx, model.ListFilter{State: model.Running, Limit: model.ListLimitMax})
	if err != nil {
		return inCall{}, false, fmt.Errorf("lane %s: %w", l.kind, err)
	}
	applied, err := l.svc.Applications()
	if err != nil {
		return inCall{}, false, fmt.Errorf("lane %s: %w", l.kind, err)
	}
	for _, t := range running {
		p := l.proc(t.Owner)
		if p == nil || !p.alive() {
			continue
		}
		effects, err := l.q.Effects(ctx, t.ID)
		if err != nil {
			return inCall{}, false, fmt.Errorf("lane %s: %w", l.kind, err)
		}
		for _, e := range effects {
			if !e.Receipted() && e.IntentFence == t.Version && applied[e.OpID] == 0 {
				return inCall{worker: p, taskID: t.ID, opID: e.OpID, fence: t.Version}, true, nil
			}
		}
	}
	return inCall{}, false, nil
}

// waitApplied waits, up to appliedMax, for the ledger to show opID applied.
func (l *lane) waitApplied(ctx context.Context, opID string) (bool, error) {
	deadline := time.Now().Add(appliedMax)
	for time.Now().Before(deadline) {
		applied, err := l.svc.Applications()
		if err != nil {
			return false, fmt.Errorf("lane %s: %w", l.kind, err)
		}
		if applied[opID] > 0 {
			return true, nil
		}
		if err := sleep(ctx, aimPoll); err != nil {
			return false, err
		}
	}
	return false, nil
}

// holdQueue takes the lane database's write lock on a connection of its
// own, as a backup tool or a stuck migration would, until unlock is called.
// unlock is safe to call more than once.
func (l *lane) holdQueue(ctx context.Context) (unlock func(), err error) {
	db, err := sql.Open("sqlite", "file:"+l.dbPath+"?_pragma=busy_timeout(5000)")
	if err != nil {
		return nil, fmt.Errorf("lane %s: hold the queue's lock: %w", l.kind, err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("lane %s: hold the queue's lock: %w", l.kind, err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		conn.Close()
		db.Close()
		return nil, fmt.Errorf("lane %s: hold the queue's lock: %w", l.kind, err)
	}
	done := false
	return func() {
		if done {
			return
		}
		done = true
		_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
		conn.Close()
		db.Close()
	}, nil
}

func (l *lane) proc(name string) *proc {
	for _, p := range l.procs {
		if p.name == name {
			return p
		}
	}
	return nil
}

package sim

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/worker"
)

// heal ends every fault: storage comes back, armed faults are cleared,
// crashed workers restart and stalled ones resume (except a claimant a
// script stalled, which its script resumes once the task is reclaimed).
func (w *World) heal(tr *tracer) {
	if w.limitsMoved {
		w.storage.Bypass(func() { tr.line("heal limits: " + w.restoreLimits()) })
	}
	for s := range w.schedDown {
		w.schedDown[s] = 0
	}
	w.stopSchedules(tr)
	w.storage.SetUnavailable(false)
	w.storage.Disarm()
	w.svc.Disarm()
	for i, sw := range w.workers {
		sw.queue.Disarm()
		sw.crashAt = false
		switch {
		case sw.proc.Crashed() || sw.stopped:
			tr.line(fmt.Sprintf("heal w%d: %s", i, w.restart(i)))
		case sw.proc.Stalled() && !w.scriptStalled(i):
			tr.line(fmt.Sprintf("heal w%d: resumed %v", i, sw.proc.Resume()))
		}
	}
}

// stopSchedules enqueues what is due one last time and removes the
// schedules, so that the liveness phase has a finite amount of work (and no
// scheduler to run); scheduleExpectations later checks that every run due
// by then was either enqueued exactly once or collapsed.
func (w *World) stopSchedules(tr *tracer) {
	if len(w.sc.Schedules) == 0 {
		return
	}
	var schedules []model.Schedule
	w.storage.Bypass(func() {
		tr.line("heal tick: " + w.tick())
		schedules, _ = w.q.Schedules(w.ctx)
		w.stopped, w.stoppedAt = schedules, w.clock.Now()
		for _, s := range schedules {
			tr.line(fmt.Sprintf("heal: remove schedule %s: %s", s.ID, errText(w.q.RemoveSchedule(w.ctx, s.ID, operatorActor))))
		}
	})
}

// scriptStalled reports whether a script stalled worker i and will resume
// it itself.
func (w *World) scriptStalled(i int) bool {
	for _, t := range w.tasks {
		if t.stalledBy != i || t.next >= len(t.spec.Script) {
			continue
		}
		for _, act := range t.spec.Script[t.next:] {
			if act == scenarios.ResumeStalled {
				return true
			}
		}
	}
	return false
}

// liveness heals the faults and runs the world in rounds (workers step
// until idle, their step runs beginning and ending as soon as they may,
// callers act, the operator recovers parked tasks, the reaper runs, the
// clock moves to the next wake-up) until every
// task settles or a bound is reached. It returns the rounds run, a
// liveness failure, or a safety violation.
func (w *World) liveness(tr *tracer) (int, string, *model.Violation) {
	w.heal(tr)
	start := w.clock.Now()
	for round := 1; round <= livenessRoundsMax; round++ {
		wake := time.Duration(0)
		for i, sw := range w.workers {
			if !sw.proc.Runnable() {
				continue
			}
			if sw.draining && sw.w.Drained() {
				tr.line(fmt.Sprintf("L%d w%d: %s; %s", round, i, w.exited(i), w.restart(i)))
			}
			for n := 0; n < stepsPerRoundMax; n++ {
				r := sw.w.Step(w.ctx)
				if r.Action == worker.ActionIdle || r.Action == worker.ActionWait {
					if w.settleRuns(i, round, tr) > 0 {
						continue // a run ended: its slot has something to do
					}
					if r.Wait > 0 && (wake == 0 || r.Wait < wake) {
						wake = r.Wait
					}
					if sw.exec != nil {
						if due := sw.exec.nextDue(w.clock.Now()); !due.IsZero() && (wake == 0 || due.Sub(w.clock.Now()) < wake) {
							wake = due.Sub(w.clock.Now())
						}
					}
					break
				}
				w.observe(i, r)
				tr.line(fmt.Sprintf("L%d +%dms step w%d: %s", round, w.clock.Since(Epoch).Milliseconds(), i, r))
				if v := w.checker.check(); v != nil {
					return round, "", v
				}
			}
		}
		for _, t := range w.tasks {
			if t.next < len(t.spec.Script) {
				tr.line(fmt.Sprintf("L%d script: %s", round, w.script(t)))
			}
		}
		if out := w.operator(); out != "" {
			tr.line(fmt.Sprintf("L%d operator: %s", round, out))
		}
		if res, err := w.q.Reap(w.ctx); err == nil && res.Expired+res.Deadlines > 0 {
			tr.line(fmt.Sprintf("L%d reap: expired %d deadlines %d", round, res.Expired, res.Deadlines))
		}
		if v := w.checker.check(); v != nil {
			return round, "", v
		}
		settled, why := w.settled()
		if settled {
			tr.line(fmt.Sprintf("L%d settled", round))
			return round, "", nil
		}
		if w.clock.Since(start) > livenessSimulatedMax {
			return round, fmt.Sprintf("not settled after %s of simulated time: %s", livenessSimulatedMax, why), nil
		}
		switch {
		case wake <= 0 || wake > time.Second:
			wake = time.Second
		case wake < 10*time.Millisecond:
			wake = 10 * time.Millisecond
		}
		w.clock.Advance(wake)
	}
	return livenessRoundsMax, fmt.Sprintf("not settled after %d rounds", livenessRoundsMax), nil
}

// allTasks lists every task as the checker last saw it, in submission
// order: every state change is an audit event, so its snapshots are
// current in all but lease and heartbeat times. The liveness phase asks
// twice a round, so the order is kept between calls (the checker only
// ever adds tasks, and a task's sequence number never changes) and the
// list is written into one buffer: it is valid until the next call.
func (w *World) allTasks() []model.Task {
	return w.listed.of(w.checker.tasks)
}

// taskList is the checker's tasks in submission order, kept between
// calls of allTasks.
type taskList struct {
	ids  []string     // the tasks' IDs by sequence number
	rows []model.Task // the last list returned
}

// of lists tasks (which only grow) in submission order.
func (l *taskList) of(tasks map[string]model.Task) []model.Task {
	if len(l.ids) != len(tasks) {
		l.ids = l.ids[:0]
		for id := range tasks {
			l.ids = append(l.ids, id)
		}
		slices.SortFunc(l.ids, func(a, b string) int { return cmp.Compare(tasks[a].Seq, tasks[b].Seq) })
	}
	l.rows = l.rows[:0]
	for _, id := range l.ids {
		l.rows = append(l.rows, tasks[id])
	}
	return l.rows
}

// settled reports whether every script has run and every task is terminal,
// parked for good, or waiting for an approval no one will give.
func (w *World) settled() (bool, string) {
	for _, t := range w.tasks {
		if t.next < len(t.spec.Script) {
			return false, fmt.Sprintf("%s still has %s to do", t.spec.Name, t.spec.Script[t.next])
		}
	}
	for _, t := range w.allTasks() {
		switch {
		case t.State.Terminal():
		case t.State == model.WaitingForApproval && !w.approverWaits(t.ID) && t.Deadline.IsZero():
		case t.State == model.NeedsReview && w.recoveries[t.ID] > operatorRecoveriesMax:
		default:
			return false, fmt.Sprintf("task %s is %s", t.ID, t.State)
		}
	}
	return true, ""
}

func (w *World) scriptOf(id string) *taskState {
	for _, t := range w.tasks {
		if t.id == id {
			return t
		}
	}
	return nil
}

// approverWaits reports whether some script will still approve or reject
// the task.
func (w *World) approverWaits(id string) bool {
	t := w.scriptOf(id)
	if t == nil {
		return false
	}
	for _, act := range t.spec.Script[t.next:] {
		if act == scenarios.Approve || act == scenarios.Reject {
			return true
		}
	}
	return false
}

// operator recovers parked tasks as the runbook says: an uncertain effect
// is settled with what the provider reports (applied or not), then the
// task is requeued with a zero grant (fresh attempts, no extra budget); a
// dead-lettered task is requeued the same way. Each task gets a bounded
// number of recoveries; a task parked again after the last is resolved as
// failed (operator_resolved).
func (w *World) operator() string {
	var out []string
	for _, task := range w.allTasks() {
		if task.State != model.NeedsReview || w.recoveries[task.ID] > operatorRecoveriesMax {
			continue
		}
		w.recoveries[task.ID]++
		if w.recoveries[task.ID] > operatorRecoveriesMax {
			err := w.q.Resolve(w.ctx, task.ID, model.Failed, operatorActor)
			w.cover.refusal(err)
			out = append(out, fmt.Sprintf("resolve %s (%s) as failed after %d requeues: %s", task.ID, task.Reason, operatorRecoveriesMax, errText(err)))
			continue
		}
		if task.Reason == model.UncertainEffect {
			var effects []model.Effect
			var err error
			w.storage.Bypass(func() { effects, err = w.q.Effects(w.ctx, task.ID) })
			if err != nil {
				out = append(out, "effects unreadable: "+err.Error())
			}
			for _, e := range effects {
				if e.Receipted() {
					continue
				}
				applied := w.service.Applied(e.OpID)
				err := w.q.SettleEffect(w.ctx, e.OpID, applied, operatorActor)
				out = append(out, fmt.Sprintf("settle %s applied=%t: %v", e.OpID, applied, errText(err)))
			}
		}
		err := w.q.Requeue(w.ctx, task.ID, model.Grant{}, operatorActor)
		out = append(out, fmt.Sprintf("requeue %s (%s): %s", task.ID, task.Reason, errText(err)))
	}
	return strings.Join(out, "; ")
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// retried reports whether the task's trail shows a charged attempt that
// was retried: a transient failure, or a lease expiry.
func (w *World) retried(id string) bool {
	if r, pruned := w.prunedRetried[id]; pruned {
		return r // its events went with it: as they were before the prune
	}
	var events []model.Event
	w.storage.Bypass(func() { events, _ = w.q.Events(w.ctx, id) })
	for _, e := range events {
		if e.Kind == model.EventRetry || e.Kind == model.EventLeaseExpired && e.To == model.Queued {
			return true
		}
	}
	return false
}

// expectations compares each scenario task's end with what it expects.
func (w *World) expectations() []string {
	var out []string
	for _, t := range w.tasks {
		fail := func(format string, args ...any) {
			out = append(out, t.spec.Name+": "+fmt.Sprintf(format, args...))
		}
		for _, f := range t.failures {
			fail("%s", f)
		}
		if t.id == "" && t.lateSubmit {
			continue // the deadline passed before a submit got through: refused, as it should be
		}
		if t.id == "" {
			fail("never submitted")
			continue
		}
		if t.next < len(t.spec.Script) {
			fail("script stopped before %s", t.spec.Script[t.next])
		}
		task, err := w.task(t.id)
		if err != nil {
			fail("unreadable: %v", err)
			continue
		}
		if d := kindExpectation(t.request, task); d != "" {
			fail("%s", d)
		}
		x := t.spec.Expect
		for _, alt := range t.spec.Also {
			if task.State == alt.State && task.Reason == alt.Reason {
				x = alt
			}
		}
		if task.State != x.State || task.Reason != x.Reason {
			fail("ended %s/%s, want %s/%s", task.State, task.Reason, x.State, x.Reason)
		}
		if x.CancelledBy != "" && task.CancelledBy != x.CancelledBy {
			fail("cancelled by %q, want %q", task.CancelledBy, x.CancelledBy)
		}
		if x.ApprovedBy != "" && task.ApprovedBy != x.ApprovedBy {
			fail("approved by %q, want %q", task.ApprovedBy, x.ApprovedBy)
		}
		if x.Retried && !w.retried(t.id) {
			fail("no charged attempt was retried")
		}
		applied := 0
		for _, op := range w.service.AppliedOps() {
			if strings.HasPrefix(op, t.id+".") {
				applied++
			}
		}
		if x.EffectsApplied >= 0 && applied != x.EffectsApplied {
			fail("%d operations applied, want %d", applied, x.EffectsApplied)
		}
		if x.LateResultRejected && t.lateAccepted {
			fail("the stalled claimant's late result was accepted")
		}
	}
	return append(out, w.scheduleExpectations()...)
}

// scheduleExpectations checks the periodic runs: every run due up to the
// last pass was enqueued exactly once or collapsed, and every enqueued run
// completed.
func (w *World) scheduleExpectations() []string {
	if len(w.sc.Schedules) == 0 {
		return nil
	}
	var out []string
	latest := map[string]int64{}
	for _, t := range w.allTasks() {
		if t.ScheduleID == "" {
			continue
		}
		if t.State != model.Completed {
			out = append(out, fmt.Sprintf("periodic run %s/%d ended %s/%s", t.ScheduleID, t.ScheduleRun, t.State, t.Reason))
		}
		if t.ScheduleRun > latest[t.ScheduleID] {
			latest[t.ScheduleID] = t.ScheduleRun
		}
	}
	for _, s := range w.stopped {
		if s.LastRun >= 0 && latest[s.ID] != s.LastRun {
			out = append(out, fmt.Sprintf("schedule %s reached run %d but its latest run in the queue is %d", s.ID, s.LastRun, latest[s.ID]))
		}
		if due := s.DueRun(w.stoppedAt); s.LastRun != due {
			out = append(out, fmt.Sprintf("schedule %s stopped at run %d with run %d due", s.ID, s.LastRun, due))
		}
	}
	return out
}

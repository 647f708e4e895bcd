package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/faults"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/worker"
)

// GroupMax is the most writes a group event of the world commits as one
// group (the queue's own bound, queue.GroupMax, is larger): group sizes
// are drawn from 1 to GroupMax, both included.
const GroupMax = 12

// Group actors: who acts in a group event (EvGroup's Name lists them,
// joined by "+"): a worker's step (w<i>), a task's caller's next scripted
// act (t<i>), the careless client's next action (c), the batch caller's
// SubmitMany (b), and a single submit of the batch caller's (s: a new
// request, or every third time an exact replay of one it sent).
const (
	groupWorker   = 'w'
	groupScript   = 't'
	groupCareless = 'c'
	groupBatch    = 'b'
	groupSubmit   = 's'
	// groupLate (l<i>), never drawn, is a late completion under a claim
	// another claim has since taken (lateComplete): worker i's, or, for i
	// the number of workers, the careless client's. A group that chases
	// completions adds it.
	groupLate = 'l'
)

// groupActor is one actor of a group event.
type groupActor struct {
	kind  byte
	index int
}

func (a groupActor) String() string {
	if a.kind == groupWorker || a.kind == groupScript || a.kind == groupLate {
		return string(a.kind) + strconv.Itoa(a.index)
	}
	return string(a.kind)
}

// parseGroupActors reads a group event's actors.
func parseGroupActors(name string) ([]groupActor, error) {
	var out []groupActor
	for _, part := range strings.Split(name, "+") {
		if part == "" {
			return nil, fmt.Errorf("group %q: empty actor", name)
		}
		a := groupActor{kind: part[0]}
		switch a.kind {
		case groupWorker, groupScript:
			n, err := strconv.Atoi(part[1:])
			if err != nil || n < 0 {
				return nil, fmt.Errorf("group %q: actor %q wants an index", name, part)
			}
			a.index = n
		case groupCareless, groupBatch, groupSubmit:
			if len(part) != 1 {
				return nil, fmt.Errorf("group %q: actor %q takes no index", name, part)
			}
		default:
			return nil, fmt.Errorf("group %q: unknown actor %q", name, part)
		}
		out = append(out, a)
	}
	if len(out) == 0 || len(out) > GroupMax {
		return nil, fmt.Errorf("group %q: 1 to %d actors", name, GroupMax)
	}
	return out, nil
}

// drawGroup draws a group event from the groups stream: its size from 1
// to GroupMax (each boundary an eighth of the time), then each actor
// (workers and scripts each at most once), and now and then a storage
// fault armed just before its first commit. At the maximum, the actors
// are the batch caller's, who always write.
func drawGroup(sc scenarios.Scenario, mix FaultMix, rng *rand.Rand) Event {
	var size int
	switch r := rng.IntN(8); {
	case r == 0:
		size = 1
	case r == 1:
		size = GroupMax
	default:
		size = 2 + rng.IntN(GroupMax-2)
	}
	var actors []string
	workers, scripts := map[int]bool{}, map[int]bool{}
	careless, batch := false, false
	for tries := 0; len(actors) < size; tries++ {
		a := groupActor{kind: groupSubmit}
		switch r := rng.IntN(20); {
		case size == GroupMax && r < 19:
		case tries >= 4*GroupMax || r == 19:
		case r < 8:
			i := rng.IntN(sc.Workers)
			if workers[i] {
				continue
			}
			workers[i] = true
			a = groupActor{kind: groupWorker, index: i}
		case r < 15:
			i := rng.IntN(len(sc.Tasks))
			if scripts[i] {
				continue
			}
			scripts[i] = true
			a = groupActor{kind: groupScript, index: i}
		case r < 17:
			if careless {
				continue
			}
			careless, a.kind = true, groupCareless
		default:
			if batch {
				continue
			}
			batch, a.kind = true, groupBatch
		}
		actors = append(actors, a.String())
	}
	e := Event{Kind: EvGroup, Name: strings.Join(actors, "+")}
	if mix.StorageFault > 0 && rng.IntN(6) == 0 {
		kinds := faults.StorageFaults()
		e.Fault = kinds[rng.IntN(len(kinds))]
	}
	return e
}

// group applies a group event. Each actor in turn runs until it either
// finishes or reaches a write, which the queue holds; then, round after
// round, the world commits the writes held, in an order (and, a quarter
// of the time, only a first part of them) drawn from its group stream, as
// one group, and lets each member's actor carry on in that order, one at
// a time, until it finishes or holds another write. Only one actor runs at
// any moment, so the world's state is touched as by one goroutine, and
// nothing a goroutine's timing decides reaches the run. The checker is
// told which actor runs and what each round committed, and takes the
// actors' reports in the order the group committed their writes
// (groupFeed).
//
// In three group events of four (drawn from the group stream), and in
// every one while a worker holds a task of a user at its running limit
// (atLimitHeld) or where the careless client acts, the group chases
// completions, which come only when a worker's run has ended: every
// worker holding a claim acts (chaseActors) and steps on until it goes
// idle (groupChaseStepsMax steps at most), the careless client acts
// several times (carelessChase); while a chasing actor's write is
// committed, each round keeps one write of another actor back for the
// next round (keepCompany); and when only such writes are left, the group
// moves on (chaseOn): it begins and ends the workers' runs, or moves the
// clock on to a worker's or a run's next moment within groupChaseWait,
// and the chasing actors act again, up to groupChaseWaits times. So a
// worker's later write, a completion with its claim most often, is
// committed in a group of several, not alone.
func (w *World) group(e Event) string {
	actors, err := parseGroupActors(e.Name)
	if err != nil {
		return "no-op: " + err.Error()
	}
	atLimit := w.atLimitHeld()
	chase := w.groups.IntN(4) != 0 || atLimit || slices.Contains(actors, groupActor{kind: groupCareless})
	if chase {
		actors = w.chaseActors(actors)
	}
	signal := make(chan struct{})
	w.q.holdWrites(func() { signal <- struct{}{} })
	feed := w.checker.beginGroup()
	outs := make([]string, len(actors))
	finished := make([]bool, len(actors))
	waits := make([]time.Duration, len(actors))
	act := func(i int) {
		finished[i] = false
		feed.actor = i
		go func() {
			out := w.groupAct(actors[i], chase)
			if outs[i] != "" {
				out = outs[i] + " / " + strings.TrimPrefix(out, actors[i].String()+" ")
			}
			outs[i], finished[i], waits[i] = out, true, 0
			if actors[i].kind == groupWorker && w.stepIdle {
				waits[i] = w.stepWait
			}
			signal <- struct{}{}
		}()
		<-signal
		feed.own(w.q.pending())
	}
	for i := range actors {
		act(i)
	}
	var sizes []string
	armed := e.Fault == ""
	moves := groupChaseWaits
	if atLimit {
		moves = groupChaseWaitsAtLimit
	}
	for waited := 0; ; {
		pending := w.q.pending()
		if chase && waited < moves && !chaserActive(actors, finished) {
			if moved := w.chaseOn(actors, waits); moved != "" {
				waited++
				sizes = append(sizes, moved)
				for i, a := range actors {
					if a.kind == groupWorker && !w.holdsUnheard(a.index) || a.kind == groupCareless && w.carelessChases() {
						act(i)
					}
				}
				continue
			}
		}
		if len(pending) == 0 {
			break
		}
		order := make([]*queue.HeldWrite, 0, len(pending))
		for _, k := range w.groups.Perm(len(pending)) {
			order = append(order, pending[k])
		}
		if len(order) > 1 && w.groups.IntN(4) == 0 {
			order = order[:1+w.groups.IntN(len(order)-1)]
		}
		if chase {
			order = keepCompany(order, feed.owner, actors)
			order = lateCompany(order, pending, feed.owner, actors)
		}
		if !armed {
			w.storage.Arm(e.Fault)
			armed = true
		}
		calls := w.q.callsOf(order)
		if chase && lateBeside(order, feed.owner, actors) {
			w.cover.path(PathGroupLateBatched)
		}
		w.q.commitHeld(order)
		feed.committed(order, heldOutcomes(order), w.clock.Now())
		sizes = append(sizes, strconv.Itoa(len(order)))
		for i, m := range order {
			feed.actor = feed.owner[m]
			w.q.resume(calls[i])
			m.Release()
			<-signal
			feed.own(w.q.pending())
		}
	}
	w.q.releaseWrites()
	w.checker.endGroup()
	if len(sizes) == 0 {
		sizes = append(sizes, "none")
	}
	out := fmt.Sprintf("groups of %s: %s", strings.Join(sizes, ","), strings.Join(outs, "; "))
	if chase {
		out = "chasing completions, " + out
	}
	return out
}

// groupChaseWait is the longest a group event that chases completions
// moves the clock on at a time, for a worker's or a run's next action; it
// moves on (runs or the clock) at most groupChaseWaits times, or
// groupChaseWaitsAtLimit times while a worker holds a task of a user at
// its running limit (atLimitHeld), long enough for that task's runs to
// end and its completion to free the user's room inside the group.
const (
	groupChaseWait         = 500 * time.Millisecond
	groupChaseWaits        = 8
	groupChaseWaitsAtLimit = 16
)

// atLimitHeld reports whether a worker holds a claim of a scripted task
// whose user has as many tasks held by the workers as the scenario's
// running limit for that user allows.
func (w *World) atLimitHeld() bool {
	limits := map[string]int{}
	for _, l := range w.sc.UserLimits {
		if l.RunningMax > 0 {
			limits[l.User] = l.RunningMax
		}
	}
	if len(limits) == 0 {
		return false
	}
	users := map[string]string{}
	for _, t := range w.tasks {
		if t.id != "" {
			users[t.id] = t.spec.Request.User
		}
	}
	held := map[string]int{}
	for _, sw := range w.workers {
		if sw.w == nil || !sw.proc.Runnable() {
			continue
		}
		for _, c := range sw.w.Claims() {
			if user, ok := users[c.TaskID]; ok && limits[user] > 0 {
				held[user]++
				if held[user] >= limits[user] {
					return true
				}
			}
		}
	}
	return false
}

// chaserActive reports whether an actor that chases (chases) is still
// under way (holding a write).
func chaserActive(actors []groupActor, finished []bool) bool {
	for i, a := range actors {
		if a.chases() && !finished[i] {
			return true
		}
	}
	return false
}

// chaseOn moves a group that chases completions on once its workers have
// gone idle: it begins the runs waiting and ends those that may end, as
// EvRunStart and EvRunEnd do; when none did, it moves the clock on to the
// moment a worker actor or a run has something to do, if that is within
// groupChaseWait, and then begins and ends runs again. It returns what it
// did for the trace, empty when nothing.
func (w *World) chaseOn(actors []groupActor, waits []time.Duration) string {
	if n := w.chaseRuns(); n > 0 {
		return fmt.Sprintf("%d runs", n)
	}
	var wait time.Duration
	earlier := func(d time.Duration) {
		if d > 0 && (wait == 0 || d < wait) {
			wait = d
		}
	}
	for i, a := range actors {
		if a.kind == groupWorker {
			earlier(waits[i])
		}
	}
	now := w.clock.Now()
	for _, sw := range w.workers {
		if _, runs := w.runnable(sw); runs {
			if due := sw.exec.nextDue(now); !due.IsZero() {
				earlier(due.Sub(now))
			}
		}
	}
	if wait == 0 || wait > groupChaseWait {
		return ""
	}
	w.clock.Advance(wait)
	out := "+" + strconv.FormatInt(wait.Milliseconds(), 10) + "ms"
	if n := w.chaseRuns(); n > 0 {
		out += fmt.Sprintf(" %d runs", n)
	}
	return out
}

// chaseRuns begins every run waiting and ends every run that may end, of
// the workers whose process runs, and returns how many it began or ended.
func (w *World) chaseRuns() int {
	n := 0
	for !strings.HasPrefix(w.runStart(), "no-op") {
		n++
	}
	for !strings.HasPrefix(w.runEnd(), "no-op") {
		n++
	}
	return n
}

// chaseActors returns actors with every worker that holds a claim and is
// not among them yet appended, in worker order, then the careless client
// when its task is short (carelessShortTask), as long as the group
// stays within GroupMax actors.
func (w *World) chaseActors(actors []groupActor) []groupActor {
	in := map[int]bool{}
	for _, a := range actors {
		if a.kind == groupWorker {
			in[a.index] = true
		}
	}
	for i, sw := range w.workers {
		if len(actors) >= GroupMax {
			break
		}
		if in[i] || sw.w == nil || !sw.proc.Runnable() || len(sw.w.Claims()) == 0 || w.holdsUnheard(i) {
			continue
		}
		actors = append(actors, groupActor{kind: groupWorker, index: i})
	}
	if len(actors) < GroupMax && w.carelessShortTask() && !slices.Contains(actors, groupActor{kind: groupCareless}) {
		actors = append(actors, groupActor{kind: groupCareless})
	}
	for i := range len(w.workers) + 1 {
		if len(actors) >= GroupMax {
			break
		}
		if _, ok := w.lateClaim(i); ok {
			actors = append(actors, groupActor{kind: groupLate, index: i})
		}
	}
	return actors
}

// lateClaim returns a claim of a task another claim has since taken (the
// task running under a newer version), whose late completion no group has
// sent yet: one worker i still holds (stalled, or not stepped since its
// lease ran out), or, for i the number of workers, one of the careless
// client's latest claims but the one it holds (which its own next write
// finds stale).
func (w *World) lateClaim(i int) (model.Claim, bool) {
	var claims []model.Claim
	switch {
	case i == len(w.workers):
		for k := len(w.careless.past) - 1; k >= 0; k-- {
			if c := w.careless.past[k]; !w.careless.held || c != w.careless.claim {
				claims = append(claims, c)
			}
		}
	case i < len(w.workers):
		if sw := w.workers[i]; sw.w != nil {
			claims = sw.w.Claims()
		}
	}
	for _, c := range claims {
		if w.lateSent[lateKey(c)] {
			continue
		}
		if t, err := w.task(c.TaskID); err == nil && t.State == model.Running && t.Version > c.Fence {
			return c, true
		}
	}
	return model.Claim{}, false
}

func lateKey(c model.Claim) string { return c.TaskID + "/" + strconv.FormatInt(c.Fence, 10) }

// lateComplete sends a completion under a claim another claim has since
// taken (lateClaim), late, under the old fence, beside the live
// completions of its group (lateCompany): worker i's, as a request the
// worker sent before its lease ran out arriving late (the worker, stepped
// again, finds its lease run out by its own clock and drops the claim),
// or the careless client's under a claim it has given up, sent with no
// look at its claim. The queue must refuse it as stale, in a batch of
// completions as alone; nothing of the sender's state changes.
func (w *World) lateComplete(i int) string {
	c, ok := w.lateClaim(i)
	if !ok {
		return "no-op: no superseded claim"
	}
	if w.lateSent == nil {
		w.lateSent = map[string]bool{}
	}
	w.lateSent[lateKey(c)] = true
	actor := carelessActor
	if i < len(w.workers) {
		actor = workerName(i)
	}
	err := w.q.Complete(w.ctx, c)
	w.cover.refusal(err)
	w.checker.report(worker.Report{Worker: actor, Action: "late_complete", TaskID: c.TaskID, Attempt: c.Attempt,
		Fence: c.Fence, Write: model.WriteComplete, Accepted: err == nil})
	line := fmt.Sprintf("late complete task=%s fence=%d", c.TaskID, c.Fence)
	if err != nil {
		return line + " -> refused: " + err.Error()
	}
	return line + " -> accepted (wrong)"
}

// lateBeside reports whether order, a round's members, holds a late
// completion (lateComplete's) and a live one.
func lateBeside(order []*queue.HeldWrite, owner map[*queue.HeldWrite]int, actors []groupActor) bool {
	late, live := false, false
	for _, m := range order {
		if actors[owner[m]].kind == groupLate {
			late = true
		} else if m.Completes() {
			live = true
		}
	}
	return late && live
}

// lateCompany returns order, a round's members, with the late completions
// pending (lateComplete's) taken out of a round without a live completion
// (a completion of another actor) pending, to wait for one; and, when one
// is pending, put first in the round with every live completion pending,
// so that the group completes them together (queue/batch.go). A round
// left with late completions alone commits them.
func lateCompany(order, pending []*queue.HeldWrite, owner map[*queue.HeldWrite]int, actors []groupActor) []*queue.HeldWrite {
	var lates, live, others []*queue.HeldWrite
	for _, m := range pending {
		switch {
		case actors[owner[m]].kind == groupLate:
			lates = append(lates, m)
		case m.Completes():
			live = append(live, m)
		default:
			others = append(others, m)
		}
	}
	if len(lates) == 0 {
		return order
	}
	var kept []*queue.HeldWrite
	for _, m := range order {
		if actors[owner[m]].kind != groupLate {
			kept = append(kept, m)
		}
	}
	switch {
	case len(live) > 0:
		for _, m := range live {
			if !slices.Contains(kept, m) {
				kept = append(kept, m)
			}
		}
		return append(lates, kept...)
	case len(kept) > 0:
		return kept
	case len(others) > 0:
		return others
	}
	return lates
}

// chases reports whether the actor takes several writes in a row in a
// group event that chases completions: the workers, who step again each
// time the group moves on, and the careless client (carelessChase), who
// acts again then (carelessChases).
func (a groupActor) chases() bool { return a.kind == groupWorker || a.kind == groupCareless }

// carelessShortTask reports whether the careless client holds a claim
// of a short task, of at most carelessChasePlan steps.
func (w *World) carelessShortTask() bool {
	c := &w.careless
	return c.held && !c.overrun && len(c.plan) <= carelessChasePlan && !w.unheard(c.claim.TaskID)
}

// unheard reports whether task id is a scenario task whose caller has not
// learned its ID yet (its submit's outcome was unknown; the caller finds
// the task by its key when it submits again). A group that chases
// completions leaves such a task to the schedule's own events: its
// expectations read its trail, which a prune takes with a terminal task,
// and the world keeps what the expectations need of a pruned task only
// for the tasks whose callers know their IDs. Carried to its end inside
// one group event, the task is more often pruned before its caller
// learns its ID.
func (w *World) unheard(id string) bool {
	var t model.Task
	for _, s := range w.tasks {
		if s.id != "" {
			continue
		}
		if t.ID == "" {
			var err error
			if t, err = w.task(id); err != nil {
				return false
			}
		}
		if s.spec.Request.User == t.User && s.spec.Request.Key == t.Key {
			return true
		}
	}
	return false
}

// holdsUnheard reports whether worker i holds a claim of a task unheard
// of by its caller (unheard).
func (w *World) holdsUnheard(i int) bool {
	sw := w.workers[i]
	if sw.w == nil {
		return false
	}
	for _, c := range sw.w.Claims() {
		if w.unheard(c.TaskID) {
			return true
		}
	}
	return false
}

// carelessChases reports whether the careless client acts again when a
// group that chases completions moves on: while it holds no claim (it
// claims) or a short task's (carelessShortTask), which it may carry on
// with up to its completion. A long task it acts on once a group event,
// as outside a chasing group: the acts of that task's caller must find
// it still under way.
func (w *World) carelessChases() bool { return !w.careless.held || w.carelessShortTask() }

// carelessChaseActs is how many actions the careless client takes at a
// time in a group event that chases completions.
const carelessChaseActs = 3

// carelessChasePlan is the most steps the plan of a task the careless
// client carries on with, when a chasing group moves on, may have.
const carelessChasePlan = 4

// carelessChase takes up to carelessChaseActs of the careless client's
// actions while it chases (carelessChases), at least one.
func (w *World) carelessChase() string {
	var outs []string
	for range carelessChaseActs {
		outs = append(outs, w.carelessAct())
		if !w.careless.held || !w.carelessChases() {
			break
		}
	}
	return strings.Join(outs, " / ")
}

// keepCompany returns order, a round's members, less the last write of an
// actor that does not chase (chases) when order holds a chasing actor's
// write and that other write besides: kept pending, it joins the group
// the chasing actor's next write (if any) is committed in.
func keepCompany(order []*queue.HeldWrite, owner map[*queue.HeldWrite]int, actors []groupActor) []*queue.HeldWrite {
	if len(order) < 2 {
		return order
	}
	worker, other := false, -1
	for i, m := range order {
		if actors[owner[m]].chases() {
			worker = true
		} else {
			other = i
		}
	}
	if !worker || other < 0 {
		return order
	}
	return append(slices.Clip(order[:other]), order[other+1:]...)
}

// groupAct is what one actor of a group event does.
func (w *World) groupAct(a groupActor, chase bool) string {
	switch a.kind {
	case groupWorker:
		if a.index >= len(w.workers) {
			return a.String() + " no-op: no such worker"
		}
		steps := groupStepsMax
		if chase {
			steps = groupChaseStepsMax
		}
		return a.String() + " " + w.groupStep(a.index, steps)
	case groupScript:
		if a.index >= len(w.tasks) {
			return a.String() + " no-op: no such task"
		}
		t := w.tasks[a.index]
		if t.next < len(t.spec.Script) && alone(t.spec.Script[t.next]) {
			return a.String() + " no-op: acts alone"
		}
		return a.String() + " " + w.script(t)
	case groupLate:
		return a.String() + " " + w.lateComplete(a.index)
	case groupCareless:
		if !chase {
			return "c " + w.carelessAct()
		}
		return "c " + w.carelessChase()
	case groupBatch:
		shapes := BatchShapes()
		return "b " + w.batch(shapes[w.batcher.batches%len(shapes)])
	}
	return "s " + w.groupSubmit()
}

// groupStepsMax is how many steps a worker takes as an actor of a group
// event, short of an idle one: a slot whose step wrote goes on to its next
// write in a later group of the same event. groupChaseStepsMax is how
// many it takes at a time in a group event that chases completions.
const (
	groupStepsMax      = 3
	groupChaseStepsMax = 8
)

// groupStep steps worker i as a group's actor: up to steps steps, until
// one finds nothing to do.
func (w *World) groupStep(i, steps int) string {
	var outs []string
	for range steps {
		w.stepIdle, w.stepWait = true, 0
		outs = append(outs, w.step(i))
		if w.stepIdle {
			break
		}
	}
	return strings.Join(outs, " / ")
}

// alone reports whether a scripted act acts on a worker process (crashes,
// restarts or stalls it), which a group's other actors, one of them
// perhaps that worker's step, must not see happen in the middle of theirs.
func alone(act scenarios.Act) bool {
	return act == scenarios.RestartWhilePaused || act == scenarios.CancelThenCrash || act == scenarios.StallClaimant
}

// groupSubmit submits one request of the batch caller's alone: a new one,
// or every third time an exact replay of one it sent.
func (w *World) groupSubmit() string {
	b := &w.batcher
	b.singles++
	req := batchRequest(0)
	req.Key = fmt.Sprintf("single-%d", b.singles)
	fresh := true
	if len(b.sent) > 0 && b.singles%3 == 0 {
		req, fresh = b.sent[b.singles%len(b.sent)], false
	}
	res, err := w.q.Submit(w.ctx, req)
	w.cover.refusal(err)
	if fresh && (err == nil || RefusalClass(err) == "") {
		b.sent = append(b.sent, req)
	}
	if err != nil {
		return fmt.Sprintf("submit %s -> refused: %v", req.Key, err)
	}
	w.replayed(req.User, req.Key, res)
	w.checker.submitted(res.TaskID)
	return fmt.Sprintf("submit %s -> %s replay=%t", req.Key, res.TaskID, res.Replay)
}

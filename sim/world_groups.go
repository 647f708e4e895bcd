package sim

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold/faults"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/scenarios"
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
)

// groupActor is one actor of a group event.
type groupActor struct {
	kind  byte
	index int
}

func (a groupActor) String() string {
	if a.kind == groupWorker || a.kind == groupScript {
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
func (w *World) group(e Event) string {
	actors, err := parseGroupActors(e.Name)
	if err != nil {
		return "no-op: " + err.Error()
	}
	signal := make(chan struct{})
	w.q.holdWrites(func() { signal <- struct{}{} })
	feed := w.checker.beginGroup()
	outs := make([]string, len(actors))
	for i, a := range actors {
		feed.actor = i
		go func() {
			outs[i] = w.groupAct(a)
			signal <- struct{}{}
		}()
		<-signal
		feed.own(w.q.pending())
	}
	var sizes []string
	armed := e.Fault == ""
	for {
		pending := w.q.pending()
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
		if !armed {
			w.storage.Arm(e.Fault)
			armed = true
		}
		calls := w.q.callsOf(order)
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
	return fmt.Sprintf("groups of %s: %s", strings.Join(sizes, ","), strings.Join(outs, "; "))
}

// groupAct is what one actor of a group event does.
func (w *World) groupAct(a groupActor) string {
	switch a.kind {
	case groupWorker:
		if a.index >= len(w.workers) {
			return a.String() + " no-op: no such worker"
		}
		return a.String() + " " + w.groupStep(a.index)
	case groupScript:
		if a.index >= len(w.tasks) {
			return a.String() + " no-op: no such task"
		}
		t := w.tasks[a.index]
		if t.next < len(t.spec.Script) && alone(t.spec.Script[t.next]) {
			return a.String() + " no-op: acts alone"
		}
		return a.String() + " " + w.script(t)
	case groupCareless:
		return "c " + w.carelessAct()
	case groupBatch:
		shapes := BatchShapes()
		return "b " + w.batch(shapes[w.batcher.batches%len(shapes)])
	}
	return "s " + w.groupSubmit()
}

// groupStepsMax is how many steps a worker takes as an actor of a group
// event, short of an idle one: a slot whose step wrote goes on to its next
// write in a later group of the same event.
const groupStepsMax = 3

// groupStep steps worker i as a group's actor: up to groupStepsMax steps,
// until one finds nothing to do.
func (w *World) groupStep(i int) string {
	var outs []string
	for range groupStepsMax {
		w.stepIdle = true
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

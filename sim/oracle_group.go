package sim

import (
	"fmt"
	"strings"
	"time"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// The oracle of a group commit (DESIGN.md, group commit). While the world
// holds the queue's writes (world_groups.go), each operation's real call
// becomes a held write, paired here with the operation; the world commits
// a list of them as one group, and the reference then applies the group
// as the production group writer does:
//
//   - the members apply in order, each as if alone, except that a group
//     of two or more completions completes them first, set-wise, in
//     member order (a completion whose claim is not current is left to
//     run whole in its turn, where it records its stale write), and the
//     claims that follow them (CompleteAndClaim's) run in their members'
//     turns, those of one worker, lease and kinds merged into the turn of
//     the first of them;
//   - a refused member keeps what the protocol records for its refusal
//     and nothing else (the reference's own refusals do exactly that);
//   - a statement error rolls the whole group back: every member must be
//     told "not applied", and nothing may have changed;
//   - a COMMIT that fails or whose outcome is unknown tells every member
//     that was not refused "outcome unknown", and the real state must be
//     the group applied as a whole or not at all: the two successors the
//     oracle accepts, never a mix of members.
//
// The whole group's events, rows and ledgers are compared at once after
// its commit; each member's outcome and returned values are compared with
// the reference's when its caller carries on.

// heldGroup pairs the held writes of a world's group event with the
// operations that made them.
type heldGroup struct {
	hold *queue.Hold
	// current is the operation whose real call is under way: the next
	// write to arrive is its.
	current heldCall
	calls   map[*queue.HeldWrite]heldCall
}

// heldCall is one operation whose write was held.
type heldCall interface {
	join()
	// applyRef runs the whole operation on the reference and keeps its
	// outcome; setRef keeps an outcome the group's plan made.
	applyRef(r *model.Reference)
	setRef(res any, err error)
	refOutcome() (any, error)
	// decide says whether the reference ran the group (not rolled back).
	decide(ran bool)
	completion() (*model.Claim, *model.ClaimRequest)
	info() opInfo
}

// call is a heldCall of an operation returning T.
type call[T any] struct {
	o      op[T]
	joined bool
	ran    bool
	refRes T
	refErr error
}

func (c *call[T]) join()                                           { c.joined = true }
func (c *call[T]) applyRef(r *model.Reference)                     { c.refRes, c.refErr = c.o.ref(r) }
func (c *call[T]) refOutcome() (any, error)                        { return c.refRes, c.refErr }
func (c *call[T]) decide(ran bool)                                 { c.ran = ran }
func (c *call[T]) info() opInfo                                    { return c.o }
func (c *call[T]) completion() (*model.Claim, *model.ClaimRequest) { return c.o.completes, c.o.next }
func (c *call[T]) setRef(res any, err error) {
	if v, ok := res.(T); ok {
		c.refRes = v
	}
	c.refErr = err
}

// runHeld runs o while the world holds the queue's writes: a write that
// joins a group is compared when the group commits (commitHeld) and here,
// on its outcome; one that did not join (it wrote nothing, or ran alone)
// is compared as alone.
func runHeld[T any](l *lockstep, o op[T]) (T, error) {
	c := &call[T]{o: o}
	l.held.current = c
	commits := l.storage.Commits()
	res, err := o.real()
	if l.held.current == heldCall(c) {
		l.held.current = nil
	}
	if !c.joined {
		return compareAlone(l, o, res, err, commits)
	}
	if !c.ran || isStorage(err) {
		return res, err // the group's outcome was checked whole (commitHeld)
	}
	if real, ref := errorClass(err), errorClass(c.refErr); real != ref {
		l.report(InvOracleOutcome, first(o.targets), fmt.Sprintf("%s in a group: queue %s (%v), reference %s (%v)%s",
			o.name, real, err, ref, c.refErr, l.where()))
	} else if err == nil && o.same != nil {
		if d := o.same(res, c.refRes); d != "" {
			l.report(InvOracleReturns, first(o.targets), fmt.Sprintf("%s in a group returned %s%s", o.name, d, l.where()))
		}
	}
	return res, err
}

// holdWrites makes the queue hold its writes; arrived is told of each,
// on its writer's goroutine, once it is paired with its operation.
func (l *lockstep) holdWrites(arrived func()) {
	g := &heldGroup{calls: map[*queue.HeldWrite]heldCall{}}
	g.hold = l.Queue.Hold(func(w *queue.HeldWrite) {
		c := g.current
		g.current = nil
		if c != nil {
			c.join()
		}
		g.calls[w] = c
		arrived()
	})
	l.held = g
}

// releaseWrites stops holding the queue's writes.
func (l *lockstep) releaseWrites() {
	l.held.hold.Release()
	l.held = nil
}

// callsOf returns the operations that made the held writes order, before
// commitHeld forgets them: resume gives each back to its caller.
func (l *lockstep) callsOf(order []*queue.HeldWrite) []heldCall {
	calls := make([]heldCall, len(order))
	for i, w := range order {
		calls[i] = l.held.calls[w]
	}
	return calls
}

// resume makes c the operation under way again, as its caller carries on
// after its group committed: a write the caller holds before its
// operation returns (the queue running the operation again after a
// retryable error) is c's.
func (l *lockstep) resume(c heldCall) { l.held.current = c }

// pending returns the held writes not committed yet, in arrival order.
func (l *lockstep) pending() []*queue.HeldWrite { return l.held.hold.Pending() }

// groupInfo is a group as settle reports it.
type groupInfo struct{ calls []heldCall }

func (g groupInfo) taskIDs() []string {
	var ids []string
	for _, c := range g.calls {
		for _, id := range c.info().taskIDs() {
			if !hasTask(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

func (g groupInfo) touchesEffects() bool {
	for _, c := range g.calls {
		if c.info().touchesEffects() {
			return true
		}
	}
	return false
}

func (g groupInfo) label() string {
	names := make([]string, len(g.calls))
	for i, c := range g.calls {
		names[i] = c.info().label()
	}
	return fmt.Sprintf("group of %d [%s]", len(g.calls), strings.Join(names, "; "))
}

// commitHeld commits order, held writes, as one group, and compares the
// group's outcome and the state it left with the reference's.
func (l *lockstep) commitHeld(order []*queue.HeldWrite) {
	calls := make([]heldCall, len(order))
	for i, w := range order {
		calls[i] = l.held.calls[w]
		delete(l.held.calls, w)
	}
	commits := l.storage.Commits()
	l.held.hold.Commit(order)
	errs := make([]error, len(order))
	for i, w := range order {
		errs[i] = w.Err()
	}
	l.coverGroup(len(order), errs)
	if l.ref == nil {
		return
	}
	l.ops++
	for i, c := range calls {
		if c == nil {
			l.report(InvOracleOutcome, "", fmt.Sprintf("a held write (%s) that no operation of the world made%s", order[i].Op(), l.where()))
			return
		}
	}
	changed := l.storage.Commits() != commits
	rolled, unknown := false, false
	for _, err := range errs {
		if isStorage(err) {
			if atCommit(err) {
				unknown = true
			} else {
				rolled = true
			}
		}
	}
	info := groupInfo{calls: calls}
	switch {
	case rolled:
		for i, err := range errs {
			if !isStorage(err) || atCommit(err) {
				l.report(InvOracleOutcome, first(calls[i].info().taskIDs()), fmt.Sprintf("%s: the group rolled back, but member %d (%s) was answered %s (%v)%s",
					info.label(), i+1, calls[i].info().label(), errorClass(err), err, l.where()))
			}
		}
		l.settle(info, l.ref, nil, changed)
	case unknown:
		before := l.ref.Clone()
		l.applyGroup(calls)
		for i, err := range errs {
			if !isStorage(err) && RefusalClass(err) == "" {
				l.report(InvOracleOutcome, first(calls[i].info().taskIDs()), fmt.Sprintf("%s: its commit failed, but member %d (%s) was answered %s%s",
					info.label(), i+1, calls[i].info().label(), errorClass(err), l.where()))
			}
		}
		l.settle(info, l.ref, before, changed)
	default:
		l.applyGroup(calls)
		l.settle(info, l.ref, nil, changed)
	}
	for _, c := range calls {
		c.decide(!rolled)
	}
}

// claimMerge is what the claims merged into one store claim share.
type claimMerge struct {
	worker string
	lease  time.Duration
	kinds  string
}

// applyGroup applies the group's members to the reference as the
// production group writer runs them (see the top of this file).
func (l *lockstep) applyGroup(calls []heldCall) {
	r := l.ref
	done := make([]bool, len(calls))
	matched := map[int]bool{}
	runs := map[int][]int{} // a merged claim's members, by its first
	inRun := map[int]bool{}
	var batch []int
	seen := map[string]bool{}
	for i, c := range calls {
		if cl, _ := c.completion(); cl != nil && !seen[cl.TaskID] {
			seen[cl.TaskID] = true
			batch = append(batch, i)
		}
	}
	completed := map[string]int{} // completions the group made, by user
	if len(batch) >= 2 {
		var kept []int
		for _, i := range batch {
			if _, next := calls[i].completion(); next != nil {
				if err := r.CheckClaimBatch(*next); err != nil {
					calls[i].setRef(nil, err)
					done[i] = true
					continue
				}
			}
			kept = append(kept, i)
		}
		for _, i := range kept {
			cl, _ := calls[i].completion()
			if r.CompleteIfCurrent(*cl) {
				matched[i] = true
				if t, err := r.Task(l.ctx, cl.TaskID); err == nil {
					completed[t.User]++
				}
			}
		}
		open := map[claimMerge]int{}
		sums := map[int]int{}
		var merged [][]int
		for _, i := range kept {
			_, next := calls[i].completion()
			if !matched[i] || next == nil {
				continue
			}
			k := claimMerge{worker: next.Worker, lease: next.Lease, kinds: next.KindsKey()}
			m, ok := open[k]
			if !ok || sums[m]+next.Max > model.ClaimBatchLimit {
				m = len(merged)
				merged = append(merged, nil)
				open[k] = m
			}
			merged[m] = append(merged[m], i)
			sums[m] += next.Max
		}
		for _, run := range merged {
			if len(run) >= 2 {
				runs[run[0]] = run
				for _, i := range run[1:] {
					inRun[i] = true
				}
			}
		}
	}
	claimed := map[string]int{} // tasks claimed after a completion of the group, by user
	for i, c := range calls {
		switch {
		case done[i]:
		case matched[i]:
			_, next := c.completion()
			if next == nil {
				c.setRef(none{}, nil)
				continue
			}
			if inRun[i] {
				continue
			}
			members := runs[i]
			if members == nil {
				members = []int{i}
			}
			for _, k := range members {
				_, nk := calls[k].completion()
				got := r.ClaimAfterCompletion(l.ctx, *nk)
				for _, cl := range got {
					claimed[cl.Task.User]++
				}
				calls[k].setRef(got, nil)
			}
		default:
			c.applyRef(r)
			res, err := c.refOutcome()
			if err != nil {
				continue
			}
			if cl, _ := c.completion(); cl != nil {
				if t, terr := r.Task(l.ctx, cl.TaskID); terr == nil {
					completed[t.User]++
				}
			}
			if got, ok := res.([]model.Claimed); ok && len(completed) > 0 {
				for _, cl := range got {
					claimed[cl.Task.User]++
				}
			}
		}
	}
	l.coverFreedRoom(completed, claimed)
	l.coverGroupClaims(calls)
}

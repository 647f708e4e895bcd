package model

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Retention in the reference model: the queue's prune (queue/prune.go),
// pass for pass, so that the audit trail's pruned events, the counters and
// every read after a prune can be compared with the queue's.

// PruneScanFactor bounds the tasks one prune pass reads: this many per
// task it may remove (the queue's pruneScanFactor).
const PruneScanFactor = 8

// PruneKeptListed is how many of the tasks a dry run keeps it names.
const PruneKeptListed = 20

// PruneSpec is a prune the reference runs, its defaults already filled
// (the queue's PruneRequest after its validation).
type PruneSpec struct {
	OlderThan time.Duration // tasks settled at or before now minus it go
	KeepKeys  time.Duration // how long the tombstones written are kept
	Batch     int           // the tasks one pass removes at most, ≥ 1
	DryRun    bool
	Actor     string
}

// PruneCounts is what a prune removed (a dry run: would remove); the
// queue's PruneResult is this type.
type PruneCounts struct {
	DryRun bool
	Cutoff time.Time // tasks settled at or before it go
	// Tasks counts the tasks removed by state.
	Tasks      map[State]int64
	Events     int64 // their events
	Effects    int64 // their effects, every one receipted
	Tombstones int64 // idempotency tombstones written
	Expired    int64 // tombstones removed, their window passed
	// Kept counts the terminal tasks settled before the cutoff that stay
	// because an effect of theirs has no receipt: the ledger's record of an
	// operation nobody knows the outcome of is never removed. A dry run
	// names the first PruneKeptListed of them in KeptIDs.
	Kept    int64
	KeptIDs []string
	// Transactions counts the transactions that removed something, each
	// recorded by a pruned event.
	Transactions int
}

// TaskCount is the number of tasks removed, of every state.
func (c PruneCounts) TaskCount() int64 {
	var n int64
	for _, k := range c.Tasks {
		n += k
	}
	return n
}

// Add adds another pass's counts to c.
func (c *PruneCounts) Add(o PruneCounts) {
	for s, n := range o.Tasks {
		c.Tasks[s] += n
	}
	c.Events += o.Events
	c.Effects += o.Effects
	c.Tombstones += o.Tombstones
	c.Expired += o.Expired
	c.Kept += o.Kept
	c.Transactions += o.Transactions
}

// Changed reports whether the pass removed or wrote anything.
func (c PruneCounts) Changed() bool {
	return c.TaskCount()+c.Events+c.Effects+c.Tombstones+c.Expired > 0
}

// DetailPruned is the pruned event's detail: a pass's counts, with no
// task ID or payload.
func DetailPruned(olderThan time.Duration, c PruneCounts) string {
	var b strings.Builder
	b.WriteString("older_than=" + FormatAge(olderThan) + " tasks=" + strconv.FormatInt(c.TaskCount(), 10))
	for _, s := range []State{Completed, Failed, Cancelled} {
		b.WriteString(" " + string(s) + "=" + strconv.FormatInt(c.Tasks[s], 10))
	}
	for _, f := range []struct {
		name string
		n    int64
	}{{"events", c.Events}, {"effects", c.Effects}, {"tombstones", c.Tombstones},
		{"expired_tombstones", c.Expired}, {"kept", c.Kept}} {
		b.WriteString(" " + f.name + "=" + strconv.FormatInt(f.n, 10))
	}
	return b.String()
}

// FormatAge prints a retention duration: whole days as 30d, anything else
// as a Go duration.
func FormatAge(d time.Duration) string {
	day := 24 * time.Hour
	if d != 0 && d%day == 0 {
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	return d.String()
}

// Tombstone is what a prune keeps of a pruned task's idempotency key, so
// that a replayed submit is still recognised and a changed one refused.
type Tombstone struct {
	User        string
	Key         string
	RequestHash string
	TaskID      string
	State       State
	SettledAt   time.Time
	PrunedAt    time.Time
	ExpiresAt   time.Time // from when a prune may remove it
}

// Tombstones returns the idempotency tombstones, by expiry, user and key.
func (r *Reference) Tombstones() []Tombstone {
	out := make([]Tombstone, 0, len(r.tombstones))
	for _, s := range r.tombstones {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if !a.ExpiresAt.Equal(b.ExpiresAt) {
			return a.ExpiresAt.Before(b.ExpiresAt)
		}
		if a.User != b.User {
			return a.User < b.User
		}
		return a.Key < b.Key
	})
	return out
}

// Prune removes the terminal tasks settled at or before the cutoff (now
// minus p.OlderThan) that it may, with their events and effects, leaving a
// tombstone of each one's key, and removes the tombstones whose window has
// passed, in passes of at most p.Batch tasks as the queue's Prune does:
// each pass that changed something is recorded by a pruned event. It never
// removes a task in review or otherwise active, a terminal task with an
// effect whose intent has no receipt (counted as kept), or the newest task.
// With p.DryRun it counts what would go and changes nothing.
func (r *Reference) Prune(_ context.Context, p PruneSpec) (PruneCounts, error) {
	cutoff := Truncate(r.clock.Now().Add(-p.OlderThan))
	if p.DryRun {
		return r.pruneCount(cutoff), nil
	}
	total := newPruneCounts(cutoff, false)
	var after int64
	for {
		res, next, done := r.prunePass(p, cutoff, after)
		total.Add(res)
		if done && res.Expired < int64(p.Batch) {
			return total, nil
		}
		after = next
	}
}

func newPruneCounts(cutoff time.Time, dry bool) PruneCounts {
	return PruneCounts{DryRun: dry, Cutoff: cutoff, Tasks: map[State]int64{}}
}

// openEffects reports whether a task has an effect whose intent has no
// receipt.
func (r *Reference) openEffects(id string) bool {
	for _, e := range r.effects {
		if e.TaskID == id && !e.Receipted() {
			return true
		}
	}
	return false
}

// prunable reports whether a prune at cutoff may remove t: terminal,
// settled at or before it, every effect receipted, not the newest task.
func (r *Reference) prunable(t *Task, cutoff time.Time) bool {
	return t.State.Terminal() && !t.UpdatedAt.After(cutoff) && !r.openEffects(t.ID) &&
		t.ID != r.order[len(r.order)-1]
}

// pruneScan is a pass's read: the tasks after the cursor in submission
// order, up to a batch that may go, stopping at the first created after
// the cutoff. It returns their IDs, the kept count, the cursor of the next
// pass and whether no task after the cursor can go.
func (r *Reference) pruneScan(cutoff time.Time, batch int, after int64) (ids []string, kept int64, next int64, done bool) {
	limit := batch * PruneScanFactor
	read, next := 0, after
	for _, id := range r.order {
		t := r.tasks[id]
		if t.Seq <= after {
			continue
		}
		if read == limit {
			break
		}
		read++
		next = t.Seq
		if t.CreatedAt.After(cutoff) {
			return ids, kept, next, true
		}
		if !t.State.Terminal() || t.UpdatedAt.After(cutoff) {
			continue
		}
		if r.openEffects(id) {
			kept++
			continue
		}
		ids = append(ids, id)
		if len(ids) == batch {
			return ids, kept, next, false
		}
	}
	return ids, kept, next, read < limit
}

// prunePass is one of the queue's prune transactions: it removes a batch
// from the cursor on, expires tombstones and records itself.
func (r *Reference) prunePass(p PruneSpec, cutoff time.Time, after int64) (PruneCounts, int64, bool) {
	res := newPruneCounts(cutoff, false)
	ids, kept, next, done := r.pruneScan(cutoff, p.Batch, after)
	res.Kept = kept
	now := r.now()
	for _, id := range ids {
		t := r.tasks[id]
		if !r.prunable(t, cutoff) {
			continue
		}
		r.tombstones[TaskKey(t.User, t.Key)] = &Tombstone{User: t.User, Key: t.Key, RequestHash: t.RequestHash,
			TaskID: t.ID, State: t.State, SettledAt: t.UpdatedAt, PrunedAt: now, ExpiresAt: now.Add(p.KeepKeys)}
		res.Tombstones++
		res.Effects += r.removeEffects(id)
		res.Events += r.removeEvents(id)
		r.removeTask(t)
		res.Tasks[t.State]++
	}
	for _, s := range r.Tombstones() {
		if s.ExpiresAt.After(now) || res.Expired == int64(p.Batch) {
			break
		}
		delete(r.tombstones, TaskKey(s.User, s.Key))
		res.Expired++
	}
	if res.Changed() {
		res.Transactions = 1
		r.emit(Event{Kind: EventPruned, Actor: p.Actor, Detail: DetailPruned(p.OlderThan, res)})
	}
	return res, next, done
}

// removeEffects removes a pruned task's effects and returns how many.
func (r *Reference) removeEffects(id string) int64 {
	var n int64
	kept := r.effectIDs[:0:0]
	for _, op := range r.effectIDs {
		if r.effects[op].TaskID == id {
			delete(r.effects, op)
			n++
			continue
		}
		kept = append(kept, op)
	}
	r.effectIDs = kept
	return n
}

// removeEvents removes a pruned task's events, keeping their counts in the
// metrics (the queue's tallies outlive the rows), and returns how many.
func (r *Reference) removeEvents(id string) int64 {
	var n int64
	kept := r.events[:0:0]
	for _, e := range r.events {
		if e.TaskID == id {
			TallyKind(&r.pruned, r.taskKind(id), e.Kind, e.From, e.To, e.Reason, 1)
			n++
			continue
		}
		kept = append(kept, e)
	}
	r.events = kept
	return n
}

// removeTask removes a pruned task's row; it counts in Metrics.Pruned.
func (r *Reference) removeTask(t *Task) {
	delete(r.tasks, t.ID)
	for i, id := range r.order {
		if id == t.ID {
			r.order = append(r.order[:i:i], r.order[i+1:]...)
			break
		}
	}
	r.pruned.Pruned++
	r.pruned.AddKind(t.Kind, Counts{Pruned: 1})
}

// pruneCount is the dry run: what a prune at cutoff would remove, with
// every tombstone whose window has passed, in one count.
func (r *Reference) pruneCount(cutoff time.Time) PruneCounts {
	res := newPruneCounts(cutoff, true)
	for _, id := range r.order {
		t := r.tasks[id]
		switch {
		case r.prunable(t, cutoff):
			res.Tasks[t.State]++
			res.Effects += int64(len(r.EffectsOf(id)))
			evs, _ := r.Events(context.Background(), id)
			res.Events += int64(len(evs))
		case t.State.Terminal() && !t.UpdatedAt.After(cutoff) && r.openEffects(id):
			res.Kept++
			if len(res.KeptIDs) < PruneKeptListed {
				res.KeptIDs = append(res.KeptIDs, id)
			}
		}
	}
	now := r.now()
	for _, s := range r.tombstones {
		if !s.ExpiresAt.After(now) {
			res.Expired++
		}
	}
	res.Tombstones = res.TaskCount()
	return res
}

// keyHolder returns the task ID and request hash a user's key is taken
// by: a task's, or the tombstone a prune left of one.
func (r *Reference) keyHolder(user, key string) (id, hash string, ok bool) {
	if t := r.byKey(user, key); t != nil {
		return t.ID, t.RequestHash, true
	}
	if s, found := r.tombstones[TaskKey(user, key)]; found {
		return s.TaskID, s.RequestHash, true
	}
	return "", "", false
}

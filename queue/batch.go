package queue

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold/internal/broken"
	"github.com/leasehold/leasehold/model"
)

// Batched completions (group commit, group.go). A group holding two or
// more completions completes them set-wise: one fenced UPDATE for all of
// them (complete_batch, which checks exactly what complete_fenced checks,
// claim by claim) and their completed events in one INSERT
// (event_insert_batch), instead of two statements each. Then the
// members run in order as before, each its own part:
//
//   - a completion the batch completed runs only what follows its
//     completion (CompleteAndClaim's claim, which so sees the completions:
//     its user's running count is down). It runs without a savepoint: its
//     completion is no longer its own to roll back, so a refusal there
//     (none is expected after its check) rolls the group back, as a
//     statement error does, and nothing is written. The events it emits
//     are buffered with the batch's (flush): they are inserted in one
//     statement before any other part runs, and before the commit, so
//     the trail holds them in the order they were made. The claims of
//     such completions are merged (see Merged claims below);
//   - a completion the batch did not match (a stale fence, an expired
//     lease, a task not running or missing) takes Complete's own path
//     from where complete_fenced matched nothing (completeRefused: the
//     stale-write event recorded and the refusal returned after the
//     commit), in its savepoint as any member;
//   - every other member runs as it did.
//
// Only the first completion of a task is batched; a second in the same
// group runs whole in its turn, so it sees the first as the same two
// operations one after the other would. A group with fewer than
// batchMin completions runs exactly as before batching (a group of one,
// which is what the simulator steps, runs the operation alone).
const batchMin = 2

// completion is a write operation that completes a claim: check, when
// set, runs first and writes nothing (it may refuse, and then nothing is
// written); then, when set, runs after the completion, in the same
// operation; and next, when set, is a claim made last, in the same
// operation (CompleteAndClaim's). next is data, not a closure, so that a
// group can merge the claims of its completions into one store claim
// (mergeClaims).
type completion struct {
	claim       model.Claim
	check, then func(t *txn) error
	next        *claimAsk
}

// claimAsk is a claim request and where the claims made for it go.
type claimAsk struct {
	req model.ClaimRequest
	out *[]model.Claimed
}

// run is the operation whole, as it runs alone: check, complete, then.
func (c *completion) run(t *txn) error {
	if c.check != nil {
		if err := c.check(t); err != nil {
			return err
		}
	}
	if err := t.complete(c.claim); err != nil {
		if broken.On(broken.CompleteClaimWhenStale) && errors.Is(err, model.ErrStaleClaim) && c.next != nil {
			return errors.Join(err, t.claim(c.next.req, c.next.out))
		}
		return err
	}
	return c.after(t)
}

// refused is the operation once the batch did not match its claim (its
// check already ran): the refusal recorded, or, only in a broken build
// that forges the checks, the completion and then.
func (c *completion) refused(t *txn) error {
	if err := t.completeRefused(c.claim); err != nil {
		return err
	}
	return c.after(t)
}

// after runs then and next, those set.
func (c *completion) after(t *txn) error {
	if c.then != nil {
		if err := c.then(t); err != nil {
			return err
		}
	}
	if c.next == nil {
		return nil
	}
	return t.claim(c.next.req, c.next.out)
}

// writeCompletion runs the completion c as one write operation.
func (q *Queue) writeCompletion(ctx context.Context, op string, c *completion) error {
	return q.writeOp(ctx, op, c.run, c, nil)
}

// part is what a member runs in its turn in the group: fn (nothing when
// nil), inside its savepoint unless bare (a part whose refusal rolls the
// group back).
type part struct {
	fn   func(t *txn) error
	bare bool
	// with are the other members whose operations fn ends (a merged
	// claim's): a statement error of fn is theirs too.
	with []int
}

// parts completes the group's batchable completions set-wise and returns
// what each member runs in its turn; false means the group was rolled
// back and every member answered.
func (g *group) parts() ([]part, bool) {
	parts := make([]part, len(g.members))
	for i, m := range g.members {
		parts[i] = part{fn: m.fn}
	}
	batch := g.completions()
	if len(batch) < batchMin {
		return parts, true
	}
	batch, ok := g.checkBatch(batch, parts)
	if !ok {
		return nil, false
	}
	if len(batch) == 0 {
		return parts, true
	}
	matched, err := g.completeBatch(batch)
	if err != nil {
		g.abort(err)
		return nil, false
	}
	for _, i := range batch {
		c := g.members[i].completes
		if matched[c.claim.TaskID] {
			parts[i] = part{} // completed: nothing follows
			if c.then != nil || c.next != nil {
				parts[i] = part{fn: c.after, bare: true}
			}
			continue
		}
		parts[i] = part{fn: c.refused}
	}
	g.mergeClaims(batch, matched, parts)
	return parts, true
}

// Merged claims. The claims that follow the batch's completions
// (CompleteAndClaim's next) are made by one store claim for each run of
// members asking for the same worker, lease and kinds at the same millisecond,
// of the sum of their Max (up to model.ClaimBatchLimit a store claim),
// instead of one store claim each (five statements on PostgreSQL). The
// merged claim runs in the turn of the run's first member, and the tasks
// it takes are handed out in member order, each member its Max, the first
// tasks in claim order to the first member: exactly what the members'
// claims would take one after the other there, since a store claim of n
// takes the first n tasks in claim order that a claim of one task at a
// time would (within the per-user running limits, which it counts as it
// takes). The other members of the run then have nothing left to run;
// each member's own Max was checked against claim_batch_max before the
// batch (checkBatch). Each claim is recorded, and its event made, in its
// own member's operation (its time and scope). A run of one claims as
// before merging.

// mergeKey is what the members of one merged claim share: the claim's
// worker, lease and kinds and the millisecond the claim runs at.
type mergeKey struct {
	worker string
	lease  time.Duration
	kinds  string // model.ClaimRequest.KindsKey
	now    int64
}

// mergeClaims merges the claims of the batch's matched completions (see
// Merged claims) into parts: the first member of each run of two or more
// runs the run's claim (after its own then), the others nothing more.
func (g *group) mergeClaims(batch []int, matched map[string]bool, parts []part) {
	var runs [][]int
	open := map[mergeKey]int{} // the run a key's next member joins
	sums := map[int]int{}      // the tasks a run asks for
	for _, i := range batch {
		c := g.members[i].completes
		if !matched[c.claim.TaskID] || c.next == nil || c.then != nil {
			continue
		}
		key := mergeKey{worker: c.next.req.Worker, lease: c.next.req.Lease, kinds: c.next.req.KindsKey(),
			now: model.Millis(g.txns[i].now)}
		r, ok := open[key]
		if !ok || sums[r]+c.next.req.Max > model.ClaimBatchLimit {
			r = len(runs)
			runs = append(runs, nil)
			open[key] = r
		}
		runs[r] = append(runs[r], i)
		sums[r] += c.next.req.Max
	}
	for r, run := range runs {
		if len(run) < 2 {
			continue
		}
		parts[run[0]] = part{fn: g.mergedClaim(run, sums[r]), bare: true, with: run[1:]}
		for _, i := range run[1:] {
			parts[i] = part{}
		}
		g.q.stats.merged.Add(int64(len(run)))
	}
}

// mergedClaim is the part that makes the claims of run's members (each a
// matched completion with next set, sharing one mergeKey) as one store
// claim of total tasks, inside the transaction of run's first member.
func (g *group) mergedClaim(run []int, total int) func(t *txn) error {
	return func(t *txn) error {
		asks := make([]*claimAsk, len(run))
		for k, i := range run {
			asks[k] = g.members[i].completes.next
			// Each claim's event goes into the group's buffer, in the
			// order the claims are made, as each member's would.
			g.txns[i].buffer = t.buffer
		}
		defer func() {
			for _, i := range run[1:] {
				g.txns[i].buffer = nil
			}
		}()
		k := 0
		return g.q.store.Claim(t, claimParams(asks[0].req, total), func(task model.Task) error {
			for len(*asks[k].out) == asks[k].req.Max {
				k++ // the store takes at most total, the sum of the Max
			}
			c, err := g.txns[run[k]].claimed(task, asks[k].req)
			if err != nil {
				return err
			}
			*asks[k].out = append(*asks[k].out, c)
			return nil
		})
	}
}

// completions returns the members that are completions, in order, but a
// second completion of a task already listed and one whose text JSON
// would not carry byte for byte (see jsonSafe).
func (g *group) completions() []int {
	var out []int
	seen := map[string]bool{}
	for i, m := range g.members {
		if m.completes == nil || seen[m.completes.claim.TaskID] {
			continue
		}
		c := m.completes.claim
		if !jsonSafe(c.TaskID) || !jsonSafe(c.Owner) || !jsonSafe(model.ScopeOf(m.ctx)) {
			continue
		}
		seen[m.completes.claim.TaskID] = true
		out = append(out, i)
	}
	return out
}

// checkBatch runs the checks of the batch's members and returns those
// that passed. A member whose check refuses is answered with the refusal
// after the commit and runs nothing more (its check wrote nothing); a
// statement error rolls the group back (false).
func (g *group) checkBatch(batch []int, parts []part) ([]int, bool) {
	kept := batch[:0]
	for _, i := range batch {
		c := g.members[i].completes
		if c.check != nil {
			err := c.check(g.txns[i])
			var keep committed
			switch {
			case err == nil:
			case isRefusal(err) && !errors.As(err, &keep):
				g.results[i], g.alone[i] = err, true
				parts[i] = part{}
				continue
			default:
				g.rollback(err, i)
				return nil, false
			}
		}
		kept = append(kept, i)
	}
	return kept, true
}

// completeBatch runs complete_batch for the batch's claims, each at its
// own operation's time, and buffers the completed events of those it
// matched; it returns the task ids completed.
func (g *group) completeBatch(batch []int) (map[string]bool, error) {
	t := g.txns[batch[0]]
	claims := make([][3]any, 0, len(batch))
	for _, i := range batch {
		c := g.members[i].completes.claim
		fence := c.Fence
		if broken.On(broken.BatchedCompletionUnfenced) {
			if task, err := t.loadTask(c.TaskID); err == nil {
				fence = task.Version
			}
		}
		claims = append(claims, [3]any{c.TaskID, fence, model.Millis(g.txns[i].now)})
	}
	arg, err := json.Marshal(claims)
	if err != nil {
		return nil, fmt.Errorf("batch completion: %w", err)
	}
	rows, err := t.query(qCompleteBatch, sql.Named("claims", string(arg)))
	if err != nil {
		return nil, err
	}
	matched := make(map[string]bool, len(batch))
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("queue: complete_batch: %w", err)
		}
		matched[id] = true
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("queue: complete_batch: %w", err)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("queue: complete_batch: %w", err)
	}
	g.q.stats.batched.Add(int64(len(matched)))
	g.batchEvents(batch, matched)
	return matched, nil
}

// batchEvents buffers the completed event of each matched claim of the
// batch, in the batch's order, as complete emits it: the claim's fence
// as fence and attempt, its owner as actor, its operation's time and
// scope.
func (g *group) batchEvents(batch []int, matched map[string]bool) {
	for _, i := range batch {
		c := g.members[i].completes.claim
		if matched[c.TaskID] {
			g.pending = append(g.pending, eventRow(g.txns[i], completedEvent(c)))
		}
	}
}

// eventRow is e as event_insert_batch takes it, at t's time and scope.
func eventRow(t *txn, e model.Event) [12]any {
	return eventRowAt(e, t.now, model.ScopeOf(t.ctx))
}

// eventRowAt is e as event_insert_batch takes it, at now in scope.
func eventRowAt(e model.Event, now time.Time, scope string) [12]any {
	return [12]any{e.TaskID, string(e.Kind), e.Attempt, e.Fence, e.OpID, string(e.From), string(e.To),
		string(e.Reason), e.Actor, model.Millis(now), e.Detail, scope}
}

// completedEvent is the event a completion of c records.
func completedEvent(c model.Claim) model.Event {
	return model.Event{TaskID: c.TaskID, Kind: model.EventCompleted, Attempt: int(c.Fence), Fence: c.Fence,
		From: model.Running, To: model.Completed, Actor: c.Owner}
}

// flush inserts the events buffered so far (event_insert_batch), before
// anything else of the group writes: the trail is in the order the
// events were made.
func (g *group) flush() error {
	if len(g.pending) == 0 {
		return nil
	}
	arg, err := json.Marshal(g.pending)
	if err != nil {
		return fmt.Errorf("queue: event_insert_batch: %w", err)
	}
	n, err := g.txns[0].exec(qEventInsertBatch, sql.Named("events", string(arg)))
	if err != nil {
		return err
	}
	if n != int64(len(g.pending)) {
		return fmt.Errorf("queue: event_insert_batch: inserted %d events, expected %d", n, len(g.pending))
	}
	g.pending = g.pending[:0]
	return nil
}

// jsonSafe reports whether s goes through the batch statements' JSON
// unchanged: valid UTF-8 (json.Marshal replaces invalid bytes) and no NUL
// (which PostgreSQL's jsonb refuses). Anything else takes the single
// statements, which bind it as it is.
func jsonSafe(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

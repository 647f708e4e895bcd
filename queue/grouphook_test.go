package queue

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// heldRig holds a queue's writes and starts operations one at a time,
// each on its own goroutine, returning once the operation's write is held
// (or it finished without one).
type heldRig struct {
	t       *testing.T
	hold    *Hold
	arrived chan *HeldWrite
}

func holdQueue(t *testing.T, q *Queue) *heldRig {
	r := &heldRig{t: t, arrived: make(chan *HeldWrite)}
	r.hold = q.Hold(func(w *HeldWrite) { r.arrived <- w })
	return r
}

// start runs op on a goroutine of its own and returns its held write and
// where its outcome goes once released.
func (r *heldRig) start(op func() error) (*HeldWrite, chan error) {
	done := make(chan error, 1)
	go func() { done <- op() }()
	select {
	case w := <-r.arrived:
		return w, done
	case err := <-done:
		r.t.Fatalf("the operation finished without a write: %v", err)
	}
	return nil, nil
}

// A held queue runs nothing until the hook commits, and then the members
// in the order the hook gave, as one group: here the second submit, given
// first, comes first in the trail.
func TestHoldCommitsMembersInTheGivenOrder(t *testing.T) {
	b := setupGroup(t)
	r := holdQueue(t, b.q)
	reqA, reqB := b.request(), b.request()
	var resA, resB model.SubmitResult
	a, doneA := r.start(func() (err error) { resA, err = b.q.Submit(b.ctx, reqA); return err })
	c, doneB := r.start(func() (err error) { resB, err = b.q.Submit(b.ctx, reqB); return err })
	require.Len(t, r.hold.Pending(), 2)
	before := b.q.GroupSizes()[2]
	r.hold.Commit([]*HeldWrite{c, a})
	require.Equal(t, before+1, b.q.GroupSizes()[2], "one group of two")
	require.Empty(t, r.hold.Pending())
	c.Release()
	require.NoError(t, <-doneB)
	a.Release()
	require.NoError(t, <-doneA)
	r.hold.Release()
	events, err := b.q.EventsAfter(b.ctx, 0, 100)
	require.NoError(t, err)
	var order []string
	for _, e := range events {
		if e.Kind == model.EventSubmitted {
			order = append(order, e.TaskID)
		}
	}
	require.Equal(t, []string{resB.TaskID, resA.TaskID}, order)
}

// A claim of a batch above claim_batch_max is refused only when there is
// something to claim where it runs: in a group whose earlier member took
// the last claimable task it claims nothing, as it would after that
// member's commit, though the read before its write found a task.
func TestClaimBatchInAGroupSeesEarlierMembers(t *testing.T) {
	b := setupGroup(t)
	limits, _, err := b.q.Limits(b.ctx)
	require.NoError(t, err)
	limits.ClaimBatchMax = 1
	require.NoError(t, b.q.SetLimits(b.ctx, limits, "operator"))
	b.submit()
	r := holdQueue(t, b.q)
	var first, second []model.Claimed
	one, doneOne := r.start(func() (err error) {
		first, err = b.q.Claim(b.ctx, model.ClaimRequest{Worker: "a", Max: 1, Lease: time.Minute})
		return err
	})
	two, doneTwo := r.start(func() (err error) {
		second, err = b.q.Claim(b.ctx, model.ClaimRequest{Worker: "b", Max: 2, Lease: time.Minute})
		return err
	})
	r.hold.Commit([]*HeldWrite{one, two})
	one.Release()
	require.NoError(t, <-doneOne)
	two.Release()
	require.NoError(t, <-doneTwo, "nothing left to claim: no refusal for the batch")
	r.hold.Release()
	require.Len(t, first, 1)
	require.Empty(t, second)
	// With a task to claim, the same batch is refused.
	b.submit()
	_, err = b.q.Claim(b.ctx, model.ClaimRequest{Worker: "b", Max: 2, Lease: time.Minute})
	require.ErrorIs(t, err, model.ErrInvalidInput)
}

package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/model"
)

// claimer is the claiming half of a worker, shared by the stepped Worker
// and the live Runner: it decides how many tasks may be claimed, sizes the
// batch, asks the queue, classifies and logs the answer, and says how long
// to wait before asking again. Scheduling stays with its user: the Worker
// turns the wait into a due time for its Step, the Runner sleeps on it.
// A claimer is not safe for concurrent use; each user has one and calls it
// from one goroutine.
type claimer struct {
	cfg *Config // the worker's
	// batchMax caps the batch once the queue has refused a larger one (its
	// claim_batch_max limit); zero until then.
	batchMax int
	// poll backs off idle polling; storage backs off while claims fail in
	// storage.
	poll, storage time.Duration
}

// room returns how many tasks may be claimed now, given the free slots,
// whether any held claim's last heartbeat failed in storage, and the
// unspent budget of the tasks held: none while a heartbeat fails (storage
// is in trouble) or while the unspent budget reaches CostCapacity, and
// otherwise one per free slot.
func (c *claimer) room(free int, heartbeatsFailing bool, exposure int64) int {
	capacity := c.cfg.CostCapacity
	if free <= 0 || heartbeatsFailing || (capacity > 0 && exposure >= capacity) {
		return 0
	}
	return free
}

// claim asks the queue for up to room tasks (room > 0), in a batch no
// larger than ClaimBatch or than the queue's limit as learnt so far. It
// returns the claim's report, the tasks claimed, and how long to wait
// before claiming again (zero: at once).
//
// A refusal naming the request's max field means the queue's
// claim_batch_max is below the batch: the cap becomes half the batch just
// asked for, and the claim is to be tried again at once (a batch of one is
// within every limit). Any other invalid-input refusal is an anomaly and
// waits PollMax; any other error is taken as storage trouble and backs off.
func (c *claimer) claim(ctx context.Context, room int) (Report, []model.Claimed, time.Duration) {
	cfg := c.cfg
	batch := min(room, cfg.ClaimBatch)
	if c.batchMax > 0 {
		batch = min(batch, c.batchMax)
	}
	r := Report{Worker: cfg.ID, Action: ActionClaim, Write: model.WriteClaim}
	claimed, err := cfg.Queue.Claim(ctx, model.ClaimRequest{Worker: cfg.ID, Max: batch, Lease: cfg.Lease, Kinds: cfg.kinds})
	r.Err = err
	var invalid *model.ValidationError
	switch {
	case err == nil:
		c.storage = 0
		r.Accepted = true
	case batch > 1 && errors.As(err, &invalid) && invalid.Field == "max":
		c.batchMax = batch / 2
		r.Outcome = fmt.Sprintf("batch of %d above the queue's limit; now %d", batch, c.batchMax)
		cfg.Logger.Info("claim batch above the queue's limit", "worker", cfg.ID, "batch", batch, "now", c.batchMax)
		return r, nil, 0
	case errors.Is(err, model.ErrInvalidInput):
		r.Anomaly = err.Error()
		c.poll = cfg.PollMax
		cfg.Logger.Error("claim refused", "worker", cfg.ID, "error", err.Error(), "retry_in", c.poll.String())
		return r, nil, c.poll
	default:
		c.storage = nextBackoff(c.storage, cfg.StorageBackoffMin, cfg.StorageBackoffMax)
		r.StorageError = true
		r.Outcome = "storage error; retry in " + c.storage.String()
		cfg.Logger.Warn("claim failed", "worker", cfg.ID, "error", err.Error(), "storage_error", true, "retry_in", c.storage.String())
		return r, nil, c.storage
	}
	if len(claimed) == 0 {
		c.poll = nextBackoff(c.poll, cfg.PollMin, cfg.PollMax)
		r.Outcome = "nothing due"
		return r, nil, c.poll
	}
	c.poll = 0
	for _, cl := range claimed {
		r.Claims = append(r.Claims, cl.Claim)
		cfg.Logger.Info("task claimed", "worker", cfg.ID, "task_id", cl.Claim.TaskID, "attempt", cl.Claim.Attempt,
			"attempt_id", cl.Claim.AttemptID(), "fence", cl.Claim.Fence)
	}
	r.Outcome = fmt.Sprintf("%d claimed", len(claimed))
	return r, claimed, 0
}

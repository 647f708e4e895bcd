package model

import (
	"context"
	"fmt"
)

// SubmitBatchMax bounds the requests of one batch submit (SubmitMany).
const SubmitBatchMax = 1000

// BatchItemError is a batch submit's refusal of one of its requests: the
// whole batch is refused because of the request at Index (counted from
// 0). It unwraps to that request's own error, so errors.Is sees its
// sentinel (ErrInvalidInput, ErrIdempotencyConflict, ErrQueueFull).
type BatchItemError struct {
	Index int
	Err   error
}

// Error returns "batch item N: " and the request's error.
func (e *BatchItemError) Error() string { return fmt.Sprintf("batch item %d: %v", e.Index, e.Err) }

// Unwrap returns the request's error.
func (e *BatchItemError) Unwrap() error { return e.Err }

// CheckBatchSize refuses a batch with no requests or more than
// SubmitBatchMax.
func CheckBatchSize(n int) error {
	if n == 0 {
		return invalid("batch", "no requests")
	}
	if n > SubmitBatchMax {
		return invalid("batch", "%d requests, more than the limit of %d (SubmitBatchMax)", n, SubmitBatchMax)
	}
	return nil
}

// BatchConflict is the error of a batch request whose user and key an
// earlier request of the same batch used with a different request.
func BatchConflict(n Normalized, earlier int) error {
	return fmt.Errorf("user %s key %s is batch item %d: %w", n.User, n.Key, earlier, ErrIdempotencyConflict)
}

// SubmitMany is Submit for a batch, all or nothing: every request is
// validated before anything is applied, and a refusal of any (naming its
// index in a BatchItemError) applies none. Each exact replay, of an
// earlier task or of an earlier request in the batch, returns the
// original ID with Replay set; the depth caps apply to the batch's new
// tasks as a whole.
func (r *Reference) SubmitMany(_ context.Context, reqs []SubmitRequest) ([]SubmitResult, error) {
	if err := CheckBatchSize(len(reqs)); err != nil {
		return nil, err
	}
	ns := make([]Normalized, len(reqs))
	for i, req := range reqs {
		if req.ScheduleID != "" || req.ScheduleRun != 0 {
			return nil, &BatchItemError{Index: i, Err: invalid("schedule_id", "set only by the scheduler")}
		}
		n, err := Normalize(req)
		if err == nil {
			err = CheckCallerKey(n.Key)
		}
		if err != nil {
			return nil, &BatchItemError{Index: i, Err: err}
		}
		ns[i] = n
	}
	if err := r.checkBatch(ns); err != nil {
		return nil, err
	}
	// The new tasks' IDs, drawn in the batch's order and checked before
	// anything is applied.
	ids := make([]string, len(ns))
	drawn := map[string]bool{}
	for i, n := range ns {
		key := TaskKey(n.User, n.Key)
		if _, _, ok := r.keyHolder(n.User, n.Key); ok || drawn[key] {
			continue
		}
		drawn[key] = true
		ids[i] = NewIDFor(r.ids, TaskIDPrefix, key)
		if err := CheckNewTaskID(ids[i]); err != nil {
			return nil, err
		}
	}
	out := make([]SubmitResult, len(ns))
	for i, n := range ns {
		res, err := r.submitAs(n, n.User, ids[i])
		if err != nil {
			// checkBatch admitted every request: a refusal here is a bug.
			panic(fmt.Sprintf("model: batch item %d refused after its check: %v", i, err))
		}
		out[i] = res
	}
	return out, nil
}

// checkBatch makes submit's checks for every request of a batch, counting
// the batch's earlier new tasks against the depth caps, without applying
// any.
func (r *Reference) checkBatch(ns []Normalized) error {
	now := r.now()
	var total int
	active := map[string]int{}
	for _, t := range r.tasks {
		if t.State.Active() {
			total++
			active[t.User]++
		}
	}
	earlier := map[string]int{} // TaskKey of a new request -> its index
	for i, n := range ns {
		key := TaskKey(n.User, n.Key)
		if j, ok := earlier[key]; ok {
			if ns[j].Hash == n.Hash {
				continue
			}
			return &BatchItemError{Index: i, Err: BatchConflict(n, j)}
		}
		if id, hash, ok := r.keyHolder(n.User, n.Key); ok {
			if hash == n.Hash {
				continue
			}
			return &BatchItemError{Index: i, Err: fmt.Errorf("user %s key %s is task %s: %w", n.User, n.Key, id, ErrIdempotencyConflict)}
		}
		if err := n.CheckTimely(now); err != nil {
			return &BatchItemError{Index: i, Err: err}
		}
		if _, depthMax := r.userLimit(n.User); depthMax > 0 && active[n.User] >= depthMax {
			return &BatchItemError{Index: i, Err: fmt.Errorf("user %s has %d active tasks (limit %d): %w", n.User, active[n.User], depthMax, ErrQueueFull)}
		}
		if r.limits.DepthMax > 0 && total >= r.limits.DepthMax {
			return &BatchItemError{Index: i, Err: fmt.Errorf("%d active tasks (limit %d): %w", total, r.limits.DepthMax, ErrQueueFull)}
		}
		earlier[key] = i
		active[n.User]++
		total++
	}
	return nil
}

// byKey returns the task a user submitted under key, or nil.
func (r *Reference) byKey(user, key string) *Task {
	for _, id := range r.order {
		if t := r.tasks[id]; t.User == user && t.Key == key {
			return t
		}
	}
	return nil
}

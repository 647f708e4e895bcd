package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/model"
)

// Queue is the part of the queue a worker writes to. *queue.Queue
// implements it; fault injectors wrap it.
type Queue interface {
	Claim(ctx context.Context, req model.ClaimRequest) ([]model.Claimed, error)
	Heartbeat(ctx context.Context, c model.Claim, lease time.Duration) (model.HeartbeatResult, error)
	CompleteStep(ctx context.Context, w model.StepWrite) (model.StepResult, error)
	RecordIntent(ctx context.Context, c model.Claim, step int) (model.IntentResult, error)
	RecordReceipt(ctx context.Context, c model.Claim, opID, result string) error
	Pause(ctx context.Context, c model.Claim, step int, gate string) (model.State, error)
	Complete(ctx context.Context, c model.Claim) error
	Fail(ctx context.Context, c model.Claim, f model.Failure) (model.State, error)
	Release(ctx context.Context, c model.Claim) (model.State, error)
	AcknowledgeCancel(ctx context.Context, c model.Claim) error
}

// Bounds on a worker's configuration.
const (
	ConcurrencyMax = 64
)

// Config configures a Worker. ID, Queue, Handler, Service and Clock are
// required; zero durations take the defaults shown.
type Config struct {
	ID      string
	Queue   Queue
	Handler Handler
	Service Service
	Clock   clockwork.Clock
	Logger  *slog.Logger // nil: discard

	Concurrency int           // tasks held at once (default 1, at most ConcurrencyMax)
	ClaimBatch  int           // tasks asked for per claim (default Concurrency)
	Lease       time.Duration // lease asked for (default 30s)
	Heartbeat   time.Duration // heartbeat interval (default Lease/3; at most Lease/2)
	// CostCapacity bounds the unspent budget of the tasks held at once; the
	// worker claims nothing new while it is reached. Zero: no bound.
	CostCapacity int64

	PollMin, PollMax                     time.Duration // idle polling backoff (100ms to 2s)
	StorageBackoffMin, StorageBackoffMax time.Duration // backoff while storage fails (100ms to 5s)
}

// withDefaults fills zero fields and validates the rest.
func (c Config) withDefaults() (Config, error) {
	if c.Queue == nil || c.Handler == nil || c.Service == nil || c.Clock == nil {
		return c, errors.New("worker: Queue, Handler, Service and Clock are required")
	}
	if err := model.CheckName("id", c.ID); err != nil {
		return c, fmt.Errorf("worker: %w", err)
	}
	if c.Concurrency == 0 {
		c.Concurrency = 1
	}
	if c.Concurrency < 1 || c.Concurrency > ConcurrencyMax {
		return c, &model.ValidationError{Field: "concurrency", Problem: fmt.Sprintf("must be between 1 and %d, got %d", ConcurrencyMax, c.Concurrency)}
	}
	if c.ClaimBatch == 0 {
		c.ClaimBatch = c.Concurrency
	}
	if c.ClaimBatch < 0 {
		return c, &model.ValidationError{Field: "claim_batch", Problem: fmt.Sprintf("must not be negative, got %d", c.ClaimBatch)}
	}
	if c.Lease == 0 {
		c.Lease = 30 * time.Second
	}
	if err := model.CheckLease(c.Lease); err != nil {
		return c, err
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = c.Lease / 3
	}
	if c.Heartbeat <= 0 || c.Heartbeat*2 > c.Lease {
		return c, &model.ValidationError{Field: "heartbeat",
			Problem: fmt.Sprintf("interval %s is not well under the lease %s (at most half)", c.Heartbeat, c.Lease)}
	}
	if c.CostCapacity < 0 {
		return c, &model.ValidationError{Field: "cost_capacity", Problem: "must not be negative"}
	}
	defaults := []struct {
		d   *time.Duration
		def time.Duration
	}{{&c.PollMin, 100 * time.Millisecond}, {&c.PollMax, 2 * time.Second},
		{&c.StorageBackoffMin, 100 * time.Millisecond}, {&c.StorageBackoffMax, 5 * time.Second}}
	for _, d := range defaults {
		if *d.d == 0 {
			*d.d = d.def
		}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c, nil
}

// shared is what a worker's slots share.
type shared struct {
	cfg   Config
	clock clockwork.Clock
	log   *slog.Logger
}

// Actions a Report names.
const (
	ActionIdle       = "idle"
	ActionWait       = "wait"
	ActionClaim      = "claim"
	ActionHeartbeat  = "heartbeat"
	ActionIntent     = "intent"
	ActionCheckLease = "check_lease"
	ActionCall       = "call"
	ActionReconcile  = "reconcile"
	ActionReceipt    = "receipt"
	ActionStep       = "step"
	ActionPause      = "pause"
	ActionComplete   = "complete"
	ActionFail       = "fail"
	ActionCancel     = "cancel_ack"
	ActionRelease    = "release"
)

// Report says what one Step did. Its String form is deterministic and
// holds no wall-clock time, so simulator traces can be fingerprinted.
type Report struct {
	Worker  string
	Action  string
	TaskID  string
	Attempt int
	Fence   int64
	OpID    string
	Outcome string
	Err     error
	// Claims lists what a claim action obtained.
	Claims []model.Claim
	// Write names the queue write the step made ("" if none); Accepted
	// reports that the queue accepted it under the claim's fence.
	Write    string
	Accepted bool
	// Called reports an external call (a service call or status query).
	Called bool
	// StorageError reports that the queue write failed in storage; the
	// step will be retried after a backoff.
	StorageError bool
	// LeaseUntil is the lease an accepted heartbeat set (claims carry
	// theirs in Claims).
	LeaseUntil time.Time
	// Wait is how long until the worker has something to do (idle, or
	// waiting out a backoff or a step's duration).
	Wait time.Duration
	// Anomaly describes something that should never happen.
	Anomaly string
}

// String renders the report on one line.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Worker, r.Action)
	if r.TaskID != "" {
		fmt.Fprintf(&b, " task=%s attempt=%d fence=%d", r.TaskID, r.Attempt, r.Fence)
	}
	if r.OpID != "" {
		fmt.Fprintf(&b, " op=%s", r.OpID)
	}
	for _, c := range r.Claims {
		fmt.Fprintf(&b, " claimed=%s/%d", c.TaskID, c.Fence)
	}
	if r.Outcome != "" {
		fmt.Fprintf(&b, " -> %s", r.Outcome)
	}
	if r.Err != nil {
		fmt.Fprintf(&b, " err=%q", r.Err.Error())
	}
	if r.Wait > 0 {
		fmt.Fprintf(&b, " wait=%dms", r.Wait.Milliseconds())
	}
	if r.Anomaly != "" {
		fmt.Fprintf(&b, " ANOMALY=%q", r.Anomaly)
	}
	return b.String()
}

// Worker holds up to Concurrency claims and advances them one Step at a
// time. It is not safe for concurrent use (the live Runner drives slots
// from goroutines of its own).
type Worker struct {
	sh    *shared
	slots []*Slot // nil: free
	next  int     // round-robin cursor over slots and then the claimer

	pollAt, retryAt         time.Time
	pollBackoff, storageOff time.Duration
	draining                bool
	// batchMax caps the claim batch once the queue has refused a larger
	// one (its claim_batch_max limit); zero until then.
	batchMax int
}

// New returns a worker with no claims.
func New(cfg Config) (*Worker, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	sh := &shared{cfg: cfg, clock: cfg.Clock, log: cfg.Logger}
	return &Worker{sh: sh, slots: make([]*Slot, cfg.Concurrency)}, nil
}

// ID returns the worker's name.
func (w *Worker) ID() string { return w.sh.cfg.ID }

// Config returns the worker's configuration with its defaults filled in.
func (w *Worker) Config() Config { return w.sh.cfg }

// Claims returns the claims the worker holds, in slot order.
func (w *Worker) Claims() []model.Claim {
	var out []model.Claim
	for _, s := range w.slots {
		if s != nil {
			out = append(out, s.claim)
		}
	}
	return out
}

// Shutdown stops claiming and asks every slot to finish any effect in
// flight and release its claim. Step on until Drained.
func (w *Worker) Shutdown() {
	w.draining = true
	for _, s := range w.slots {
		if s != nil {
			s.drain()
		}
	}
}

// Drained reports whether a shut-down worker holds no claims.
func (w *Worker) Drained() bool { return w.draining && len(w.Claims()) == 0 }

// Step performs the next action of the first slot (round robin) that has
// one, or claims when a slot is free and polling is due. When nothing is
// due it returns an idle report whose Wait says for how long.
func (w *Worker) Step(ctx context.Context) Report {
	now := w.sh.clock.Now()
	n := len(w.slots) + 1
	for i := 0; i < n; i++ {
		at := (w.next + i) % n
		if at == len(w.slots) {
			if w.canClaim(now) {
				w.next = (at + 1) % n
				return w.claim(ctx, now)
			}
			continue
		}
		s := w.slots[at]
		if s == nil || s.ReadyAt().After(now) {
			continue
		}
		w.next = (at + 1) % n
		r := s.Step(ctx)
		if s.Done() {
			w.slots[at] = nil
		}
		return r
	}
	r := Report{Worker: w.sh.cfg.ID, Action: ActionIdle}
	if wake := w.wakeAt(); !wake.IsZero() {
		r.Wait = wake.Sub(now)
	}
	return r
}

// wakeAt returns the earliest time something becomes due, or zero if
// nothing ever will (a drained worker).
func (w *Worker) wakeAt() time.Time {
	var at time.Time
	earlier := func(t time.Time) {
		if at.IsZero() || t.Before(at) {
			at = t
		}
	}
	for _, s := range w.slots {
		if s != nil {
			earlier(s.ReadyAt())
		}
	}
	if w.mayClaim() {
		due := w.pollAt
		if w.retryAt.After(due) {
			due = w.retryAt
		}
		earlier(due)
	}
	return at
}

func (w *Worker) free() int {
	n := 0
	for _, s := range w.slots {
		if s == nil {
			n++
		}
	}
	return n
}

// heartbeatsFailing reports whether any held claim's last heartbeat failed
// in storage.
func (w *Worker) heartbeatsFailing() bool {
	for _, s := range w.slots {
		if s != nil && s.heartbeatFailing {
			return true
		}
	}
	return false
}

// exposure is the unspent budget of the tasks held.
func (w *Worker) exposure() int64 {
	var sum int64
	for _, s := range w.slots {
		if s != nil {
			sum += s.task.CostBudget - s.task.CostUsed
		}
	}
	return sum
}

// mayClaim: a free slot, heartbeats healthy, cost capacity left, not
// shutting down. Only a slot's step changes these, so while one fails the
// claimer has no wake-up time of its own.
func (w *Worker) mayClaim() bool {
	capacity := w.sh.cfg.CostCapacity
	return !w.draining && w.free() > 0 && !w.heartbeatsFailing() && (capacity == 0 || w.exposure() < capacity)
}

// canClaim: mayClaim, polling due and storage not backing off.
func (w *Worker) canClaim(now time.Time) bool {
	return w.mayClaim() && !now.Before(w.pollAt) && !now.Before(w.retryAt)
}

func (w *Worker) claim(ctx context.Context, now time.Time) Report {
	r := Report{Worker: w.sh.cfg.ID, Action: ActionClaim, Write: "claim"}
	batch := min(w.free(), w.sh.cfg.ClaimBatch)
	if w.batchMax > 0 {
		batch = min(batch, w.batchMax)
	}
	claimed, err := w.sh.cfg.Queue.Claim(ctx, model.ClaimRequest{Worker: w.sh.cfg.ID, Max: batch, Lease: w.sh.cfg.Lease})
	r.Err = err
	var invalid *model.ValidationError
	switch {
	case err == nil:
		w.storageOff = 0
		r.Accepted = true
	case batch > 1 && errors.As(err, &invalid) && invalid.Field == "max":
		// The queue's claim_batch_max is below the batch (a batch of one
		// is within every limit): halve it and claim again at once.
		w.batchMax = batch / 2
		r.Outcome = fmt.Sprintf("batch of %d above the queue's limit; now %d", batch, w.batchMax)
		return r
	case errors.Is(err, model.ErrInvalidInput):
		r.Anomaly = err.Error()
		w.pollBackoff = w.sh.cfg.PollMax
		w.pollAt = now.Add(w.pollBackoff)
		return r
	default:
		w.storageOff = nextBackoff(w.storageOff, w.sh.cfg.StorageBackoffMin, w.sh.cfg.StorageBackoffMax)
		w.retryAt = now.Add(w.storageOff)
		r.StorageError = true
		r.Outcome = "storage error; retry in " + w.storageOff.String()
		w.sh.log.Warn("claim failed", "worker", w.sh.cfg.ID, "error", err.Error())
		return r
	}
	if len(claimed) == 0 {
		w.pollBackoff = nextBackoff(w.pollBackoff, w.sh.cfg.PollMin, w.sh.cfg.PollMax)
		w.pollAt = now.Add(w.pollBackoff)
		r.Outcome = "nothing due"
		return r
	}
	w.pollBackoff, w.pollAt = 0, now
	for _, c := range claimed {
		r.Claims = append(r.Claims, c.Claim)
		for i, s := range w.slots {
			if s == nil {
				w.slots[i] = newSlot(w.sh, c, now)
				break
			}
		}
		w.sh.log.Info("task claimed", "worker", w.sh.cfg.ID, "task_id", c.Claim.TaskID, "attempt", c.Claim.Attempt,
			"attempt_id", c.Claim.AttemptID(), "fence", c.Claim.Fence)
	}
	r.Outcome = fmt.Sprintf("%d claimed", len(claimed))
	return r
}

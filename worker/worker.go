package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// Queue is what a worker writes to the queue: queue.WorkerWrites, the one
// declaration of it, under the name Config uses. *queue.Queue implements
// it; fault injectors wrap it.
type Queue = queue.WorkerWrites

// Bounds on a worker's configuration.
const (
	ConcurrencyMax = 64
)

// Config configures a Worker. ID, Queue, Handler and Clock are required
// (a Kinds as Handler serves several kinds, each by its own handler);
// Service is required when the handler may declare ledgered effects (see
// Effectful); zero durations take the defaults shown.
type Config struct {
	ID      string
	Queue   Queue
	Handler Handler
	// Service applies the effects that planned steps declare
	// (StepSpec.Effect), through the effects ledger. A handler that
	// declares none (a HandlerFunc, say) needs none.
	Service Service
	Clock   clockwork.Clock
	Logger  *slog.Logger // nil: discard
	// Executor runs the handler's steps (see Executor). Nil: Inline for a
	// stepped Worker (New), Goroutines for a live Runner (NewRunner).
	Executor Executor
	// StepTimeout bounds the run of every step whose StepSpec sets no
	// Timeout of its own (see ErrStepTimeout). Zero: no bound.
	StepTimeout time.Duration

	Concurrency int           // tasks held at once (default 1, at most ConcurrencyMax)
	ClaimBatch  int           // tasks asked for per claim (default Concurrency)
	Lease       time.Duration // lease asked for (default 30s)
	Heartbeat   time.Duration // heartbeat interval (default Lease/3; at most Lease/2)
	// CostCapacity bounds the unspent budget of the tasks held at once; the
	// worker claims nothing new while it is reached. Zero: no bound.
	CostCapacity int64
	// Refill has a stepped Worker's slot that completes its task claim its
	// next in the same write, as a live Runner's slots do, when Queue is a
	// CompleteClaimer that ClaimsOnCompletion: one task, when the claimer
	// would have room for it with the slot free. (A Runner always does.)
	Refill bool
	// ClaimAhead has each slot of a live Runner, over a queue that can
	// complete several claims in one write (EachCompleteClaimer), hold up
	// to ClaimAhead tasks claimed ahead of the one it runs, and write the
	// completions of the tasks it ran in one write with the one that ends
	// its run of them, claiming as many again (see ahead.go), where the
	// queue says claiming ahead pays (EachCompleteClaimer.ClaimsAhead).
	// Zero: DefaultClaimAhead; negative: none, a slot holds one task at a
	// time. At most ClaimAheadMax; none while CostCapacity bounds the
	// budget held. A stepped Worker (New) never claims ahead.
	ClaimAhead int

	PollMin, PollMax time.Duration // idle polling backoff (100ms to 2s)
	// StorageBackoffMin and StorageBackoffMax bound the backoff while
	// storage fails (100ms to 5s). A slot's calls to the service back off
	// between the same bounds while it is unavailable, on a backoff of their
	// own that queue writes (heartbeats included) do not reset.
	StorageBackoffMin, StorageBackoffMax time.Duration

	// kinds is what the worker's claims name: its Handler's kinds when it
	// is a Kinds, nil (every kind) otherwise.
	kinds []string
}

// withDefaults fills zero fields and validates the rest.
func (c Config) withDefaults() (Config, error) {
	if c.Queue == nil || c.Handler == nil || c.Clock == nil {
		return c, errors.New("worker: Queue, Handler and Clock are required")
	}
	if k, ok := c.Handler.(Kinds); ok {
		if err := k.Check(); err != nil {
			return c, err
		}
	}
	c.kinds = servedKinds(c.Handler)
	if e, ok := c.Handler.(Effectful); ok && e.MakesEffects() && c.Service == nil {
		return c, fmt.Errorf("worker: the handler (%T) may declare ledgered effects, so a Service is required to apply them", c.Handler)
	}
	if c.StepTimeout < 0 {
		return c, &model.ValidationError{Field: "step_timeout", Problem: fmt.Sprintf("must not be negative, got %s", c.StepTimeout)}
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
	if c.ClaimAhead > ClaimAheadMax {
		return c, &model.ValidationError{Field: "claim_ahead", Problem: fmt.Sprintf("must be at most %d, got %d", ClaimAheadMax, c.ClaimAhead)}
	}
	switch {
	case c.ClaimAhead < 0 || c.CostCapacity > 0:
		c.ClaimAhead = 0
	case c.ClaimAhead == 0:
		c.ClaimAhead = DefaultClaimAhead
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
		// A handler that is never enabled: a record is not even built,
		// where a text handler on io.Discard formats every one.
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Action names what one Step of a worker did. An action that makes one of
// the queue's writes has that write's name (model.Write).
type Action string

// The actions a Report names.
const (
	ActionIdle       Action = "idle"
	ActionWait       Action = "wait"
	ActionRun        Action = "run" // a step's run started and has not ended yet
	ActionClaim      Action = Action(model.WriteClaim)
	ActionHeartbeat  Action = Action(model.WriteHeartbeat)
	ActionIntent     Action = Action(model.WriteIntent)
	ActionCheckLease Action = "check_lease"
	ActionCall       Action = "call"
	ActionReconcile  Action = "reconcile"
	ActionReceipt    Action = Action(model.WriteReceipt)
	ActionStep       Action = Action(model.WriteStep)
	ActionPause      Action = Action(model.WritePause)
	ActionComplete   Action = Action(model.WriteComplete)
	ActionFail       Action = Action(model.WriteFail)
	ActionCancel     Action = Action(model.WriteCancelAck)
	ActionRelease    Action = Action(model.WriteRelease)
)

// Report says what one Step did. Its String form is deterministic and
// holds no wall-clock time, so simulator traces can be fingerprinted.
type Report struct {
	Worker string
	Action Action
	// Phase is the phase the slot was in when the step began (see
	// Slot.Phase); empty for the claimer's and an idle worker's steps.
	Phase   string
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
	Write    model.Write
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
	cfg      *Config // shared with the slots
	slots    []*Slot // nil: free
	next     int     // round-robin cursor over slots and then the claimer
	claimer  claimer
	claimAt  time.Time // the claimer is due again (polling or backing off)
	draining bool
	// refills: Config.Refill over a queue that claims on completion.
	refills bool
}

// New returns a worker with no claims.
func New(cfg Config) (*Worker, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Executor == nil {
		cfg.Executor = Inline{}
	}
	w := &Worker{cfg: &cfg, slots: make([]*Slot, cfg.Concurrency)}
	w.claimer.cfg = w.cfg
	if cc, ok := cfg.Queue.(CompleteClaimer); ok && cfg.Refill {
		w.refills = cc.ClaimsOnCompletion()
	}
	return w, nil
}

// refillRequest says whether slot s, about to complete its task, may claim
// its next one in the same write, and the claim to ask for: one task, when
// the claimer would have room for one with s free (the other slots'
// failing heartbeats and unspent budget counted), and none while shutting
// down.
func (w *Worker) refillRequest(s *Slot) (model.ClaimRequest, bool) {
	if w.draining {
		return model.ClaimRequest{}, false
	}
	failing := false
	var exposure int64
	for _, other := range w.slots {
		if other != nil && other != s {
			failing = failing || other.heartbeatFailing
			exposure += other.task.CostBudget - other.task.CostUsed
		}
	}
	if w.claimer.room(1, failing, exposure) == 0 {
		return model.ClaimRequest{}, false
	}
	return model.ClaimRequest{Worker: w.cfg.ID, Max: 1, Lease: w.cfg.Lease, Kinds: w.cfg.kinds}, true
}

// ID returns the worker's name.
func (w *Worker) ID() string { return w.cfg.ID }

// Config returns the worker's configuration with its defaults filled in.
func (w *Worker) Config() Config { return *w.cfg }

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

// Phases names, in slot order, what each held claim's slot will do next
// (see Slot.Phase): where a crash or a stall would catch the worker.
func (w *Worker) Phases() []string {
	var out []string
	for _, s := range w.slots {
		if s != nil {
			out = append(out, s.Phase())
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
func (w *Worker) Drained() bool { return w.draining && w.free() == len(w.slots) }

// Step performs the next action of the first slot (round robin) that has
// one, or claims when a slot is free and polling is due. When nothing is
// due it returns an idle report whose Wait says for how long.
func (w *Worker) Step(ctx context.Context) Report {
	now := w.cfg.Clock.Now()
	n := len(w.slots) + 1
	for i := 0; i < n; i++ {
		at := (w.next + i) % n
		if at == len(w.slots) {
			if room := w.room(); room > 0 && !now.Before(w.claimAt) {
				w.next = (at + 1) % n
				return w.claim(ctx, now, room)
			}
			continue
		}
		s := w.slots[at]
		if s == nil || s.ReadyAt().After(now) {
			continue
		}
		w.next = (at + 1) % n
		if w.refills {
			s.refill = func() (model.ClaimRequest, bool) { return w.refillRequest(s) }
		}
		r := s.Step(ctx)
		if s.Done() {
			w.slots[at] = nil
			if len(s.refilled) > 0 {
				w.slots[at] = newSlot(w.cfg, s.refilled[0], w.cfg.Clock.Now())
			}
		}
		return r
	}
	r := Report{Worker: w.cfg.ID, Action: ActionIdle}
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
	if w.room() > 0 {
		earlier(w.claimAt)
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

// room returns how many tasks the worker may claim now (see claimer.room):
// none while shutting down. Only a slot's step changes it, so while it is
// zero the claimer has no wake-up time of its own.
func (w *Worker) room() int {
	if w.draining {
		return 0
	}
	failing := false
	var exposure int64
	for _, s := range w.slots {
		if s != nil {
			failing = failing || s.heartbeatFailing
			exposure += s.task.CostBudget - s.task.CostUsed
		}
	}
	return w.claimer.room(w.free(), failing, exposure)
}

// claim claims up to room tasks into free slots and schedules the next
// claim.
func (w *Worker) claim(ctx context.Context, now time.Time, room int) Report {
	r, claimed, wait := w.claimer.claim(ctx, room)
	w.claimAt = now.Add(wait)
	for _, c := range claimed {
		for i, s := range w.slots {
			if s == nil {
				w.slots[i] = newSlot(w.cfg, c, now)
				break
			}
		}
	}
	return r
}

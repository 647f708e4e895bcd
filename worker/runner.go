package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// Housekeeper is the queue housekeeping a live worker also runs: the
// reaper and the periodic scheduler (and, if it is also a Pruner,
// retention). *queue.Queue implements it.
type Housekeeper interface {
	Reap(ctx context.Context) (model.ReapResult, error)
	EnqueueDue(ctx context.Context) (model.EnqueueResult, error)
}

// Pruner is the retention step of housekeeping: a Housekeeper that also
// implements it (*queue.Queue does) prunes, on every housekeeping pass,
// one bounded batch of the terminal tasks the stored retention policy
// says are old enough (none while the policy is off, the default).
type Pruner interface {
	PruneDue(ctx context.Context) (queue.PruneResult, error)
}

// RunOptions configures the live Runner beyond the worker's Config.
type RunOptions struct {
	// Housekeeper, when set, is run every HousekeepingEvery (default: the
	// heartbeat interval): reaping expired leases and deadlines, and
	// enqueueing due periodic runs.
	Housekeeper       Housekeeper
	HousekeepingEvery time.Duration
	// OnReport, when set, receives every report (from several goroutines).
	OnReport func(Report)
	// ShutdownGrace bounds the drain after Run's context ends (default:
	// the worker's lease). Claims still held when it ends are left to the
	// reaper, and Run returns ErrClaimsLeft naming them.
	ShutdownGrace time.Duration
	// Waker, when set, wakes the idle claimer early when a task may have
	// become claimable; nil uses the worker's Queue if it is a Waker
	// (*queue.Queue is; a wrapper need not be). Polling stays the
	// fallback: a wake-up only cuts a wait short.
	Waker Waker
}

// Waker tells an idle claimer that a task may have become claimable (on
// PostgreSQL: LISTEN/NOTIFY, from any machine; on SQLite: a commit of the
// same process). *queue.Queue implements it; its channel may be nil
// (never receives).
type Waker interface {
	Wake(ctx context.Context, log *slog.Logger) <-chan struct{}
}

// ErrClaimsLeft is returned by Run when the shutdown did not settle or
// release every claim the worker held: some were still held when the
// grace ended (storage unavailable, a call that does not return), or were
// dropped because their lease ran out. The reaper takes them over; the
// attempt is charged.
var ErrClaimsLeft = errors.New("claims left to the reaper")

// LeftClaim is a claim a shutdown left, and why.
type LeftClaim struct {
	Claim model.Claim
	Why   string
}

// Runner runs a worker live: one goroutine per slot, each stepping its own
// claim in order and sleeping on the clock between steps, and one claimer
// that hands claimed tasks to idle slots. Nothing is shared between slots
// but the counters guarded here and the goroutine-safe queue.
type Runner struct {
	cfg     *Config // shared with the slots
	opts    RunOptions
	claimer claimer // used by the claimer goroutine only

	mu        sync.Mutex
	idle      int                    // slots without a claim
	exposure  map[*Slot]int64        // unspent budget of each held claim
	hbFailing map[*Slot]bool         // slots whose last heartbeat failed in storage
	held      map[string]model.Claim // claims held, by task
	wake      chan struct{}          // pokes the claimer when a slot frees
	draining  bool                   // Run's context has ended
	gaveUp    bool                   // the shutdown grace has ended
	left      []LeftClaim            // claims the drain left, in the order it left them
}

// NewRunner validates cfg and returns a runner.
func NewRunner(cfg Config, opts RunOptions) (*Runner, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if opts.HousekeepingEvery == 0 {
		opts.HousekeepingEvery = cfg.Heartbeat
	}
	if opts.ShutdownGrace == 0 {
		opts.ShutdownGrace = cfg.Lease
	}
	if opts.ShutdownGrace < 0 {
		return nil, &model.ValidationError{Field: "shutdown_grace", Problem: "must not be negative"}
	}
	if min := leaseMinOf(cfg.Queue, opts.Housekeeper, opts.Waker); cfg.Lease < min {
		return nil, &model.ValidationError{Field: "lease", Problem: fmt.Sprintf("%s is shorter than the queue's minimum lease %s "+
			"(its idle-in-transaction timeout plus its TCP user timeout: how long a worker cut off inside a transaction "+
			"can hold up others' writes; see RUNBOOK.md, A partitioned worker)", cfg.Lease, min)}
	}
	r := &Runner{cfg: &cfg, opts: opts, idle: cfg.Concurrency,
		exposure: map[*Slot]int64{}, hbFailing: map[*Slot]bool{}, held: map[string]model.Claim{},
		wake: make(chan struct{}, 1)}
	r.claimer.cfg = r.cfg
	if r.cfg.Executor == nil {
		r.cfg.Executor = Goroutines{}
	}
	return r, nil
}

// LeaseMinimum is a queue that states the shortest lease its live
// workers may take (*queue.Queue does: on PostgreSQL, the time a session
// cut off inside a transaction can hold locks other workers' writes wait
// for, which their leases must outlast).
type LeaseMinimum interface {
	LeaseMin() time.Duration
}

// leaseMinOf is the longest minimum lease any of the runner's queues
// states: the worker's Queue, or the Housekeeper or Waker when the Queue
// is a wrapper that hides it.
func leaseMinOf(queues ...any) time.Duration {
	var min time.Duration
	for _, q := range queues {
		if m, ok := q.(LeaseMinimum); ok {
			min = max(min, m.LeaseMin())
		}
	}
	return min
}

// Claims returns the claims held now, in no particular order.
func (r *Runner) Claims() []model.Claim {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]model.Claim, 0, len(r.held))
	for _, c := range r.held {
		out = append(out, c)
	}
	return out
}

// Run runs until ctx is done, then shuts down gracefully: it claims nothing
// new, lets every slot finish the effect it has in flight, and releases or
// finishes each claim; it returns once every slot is done, or once
// ShutdownGrace has passed since ctx ended, whichever is first. Queue calls
// use a context that is never cancelled, so a shutdown never abandons a
// write half way (database/sql rolls back cancelled transactions
// asynchronously); a call still under way when the grace ends is left to
// finish or fail on its own, and its claim is reported as left.
//
// Run returns nil when the drain settled or released every claim, and an
// error wrapping ErrClaimsLeft otherwise, after logging each claim left
// (task ID, attempt, fence, why); Left lists them.
func (r *Runner) Run(ctx context.Context) error {
	work := make(chan []model.Claimed)
	drain := make(chan struct{})
	abandon := make(chan struct{})
	var slots, helpers sync.WaitGroup
	for i := 0; i < r.cfg.Concurrency; i++ {
		slots.Add(1)
		go func() {
			defer slots.Done()
			r.slotLoop(work, drain, abandon)
		}()
	}
	stopHelpers := make(chan struct{})
	if r.opts.Housekeeper != nil {
		helpers.Add(1)
		go func() {
			defer helpers.Done()
			r.housekeep(stopHelpers)
		}()
	}
	claiming := make(chan struct{})
	notified := r.notifications(ctx)
	go func() {
		defer close(claiming)
		r.claimLoop(ctx, work, notified)
		close(work)
	}()
	<-ctx.Done()
	grace := r.cfg.Clock.NewTimer(r.opts.ShutdownGrace)
	defer grace.Stop()
	r.mu.Lock()
	r.draining = true
	held := len(r.held)
	r.mu.Unlock()
	r.cfg.Logger.Info("worker shutting down", "worker", r.cfg.ID, "claims", held,
		"grace_ms", r.opts.ShutdownGrace.Milliseconds())
	close(drain)
	drained := make(chan struct{})
	go func() {
		<-claiming
		slots.Wait()
		close(stopHelpers)
		helpers.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-grace.Chan():
		r.giveUp()
		close(abandon)
	}
	left := r.Left()
	for _, l := range left {
		r.cfg.Logger.Warn("claim left to the reaper", "worker", r.cfg.ID, "task_id", l.Claim.TaskID,
			"attempt", l.Claim.Attempt, "attempt_id", l.Claim.AttemptID(), "fence", l.Claim.Fence, "why", l.Why)
	}
	if len(left) > 0 {
		r.cfg.Logger.Warn("worker stopped, leaving claims", "worker", r.cfg.ID, "left", len(left))
		return fmt.Errorf("worker %s: %w: %d (see the log)", r.cfg.ID, ErrClaimsLeft, len(left))
	}
	r.cfg.Logger.Info("worker stopped", "worker", r.cfg.ID)
	return nil
}

// giveUp ends the drain at the end of the grace: every claim still held is
// left, and nothing the slots do from now on is recorded.
func (r *Runner) giveUp() {
	r.mu.Lock()
	defer r.mu.Unlock()
	var still []LeftClaim
	for _, c := range r.held {
		still = append(still, LeftClaim{Claim: c, Why: "still held when the shutdown grace ended"})
	}
	slices.SortFunc(still, func(a, b LeftClaim) int { return strings.Compare(a.Claim.TaskID, b.Claim.TaskID) })
	r.left = append(r.left, still...)
	r.gaveUp = true
}

// Left returns the claims the shutdown left to the reaper so far.
func (r *Runner) Left() []LeftClaim {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]LeftClaim(nil), r.left...)
}

func (r *Runner) report(rep Report) {
	if r.opts.OnReport != nil {
		r.opts.OnReport(rep)
	}
}

// sleep waits for d on the runner's clock, or until stop or ended (a
// run's end; nil never) closes; it reports whether it slept the whole
// time.
func (r *Runner) sleep(d time.Duration, stop, ended <-chan struct{}) bool {
	if d <= 0 {
		return true
	}
	timer := r.cfg.Clock.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.Chan():
		return true
	case <-stop:
		return false
	case <-ended:
		return false
	}
}

// room returns how many tasks the claimer may ask for now (see
// claimer.room).
func (r *Runner) room() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	failing := false
	for _, f := range r.hbFailing {
		failing = failing || f
	}
	var exposure int64
	for _, e := range r.exposure {
		exposure += e
	}
	return r.claimer.room(r.idle, failing, exposure)
}

// notifications returns the wake-ups of the runner's Waker (RunOptions.Waker
// or the queue) until ctx ends, or nil when it has none.
func (r *Runner) notifications(ctx context.Context) <-chan struct{} {
	w := r.opts.Waker
	if w == nil {
		w, _ = r.cfg.Queue.(Waker)
	}
	if w == nil {
		return nil
	}
	return w.Wake(ctx, r.cfg.Logger.With("worker", r.cfg.ID))
}

// idleFor waits for wait on the runner's clock, or until ctx ends, a slot
// frees (wake) or notified fires, whichever is first. Its timer is stopped
// when it wakes early, so a runner woken often leaves no timers behind on
// the clock.
func (r *Runner) idleFor(ctx context.Context, wait time.Duration, notified <-chan struct{}) {
	t := r.cfg.Clock.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-r.wake:
	case <-notified:
	case <-t.Chan():
	}
}

// claimLoop claims while ctx lives and hands each claim to a slot. It
// sleeps while there is no room (until a slot frees, or PollMax) and for
// the wait the claimer asks for (polling backoff, storage backoff), woken
// early when a slot frees or notified says a task may be claimable.
func (r *Runner) claimLoop(ctx context.Context, work chan<- []model.Claimed, notified <-chan struct{}) {
	per := 1 + r.claimsAhead()
	for ctx.Err() == nil {
		wait := r.cfg.PollMax
		if room := r.room(); room > 0 {
			// With lanes, claims follow one another until every free slot's
			// lane is full or the queue has no more.
			var claimed []model.Claimed
			for want := room * per; len(claimed) < want; {
				var rep Report
				var got []model.Claimed
				rep, got, wait = r.claimer.claim(context.Background(), want-len(claimed))
				r.report(rep)
				claimed = append(claimed, got...)
				if per == 1 || wait > 0 || len(got) == 0 || len(got) < min(want-len(claimed)+len(got), r.cfg.ClaimBatch) {
					break
				}
			}
			// Each free slot takes one task, and then the tasks claimed
			// ahead are spread over them, a slot's lane at most per.
			slots := min(room, len(claimed))
			lanes := make([][]model.Claimed, slots)
			for i, c := range claimed {
				lanes[i%slots] = append(lanes[i%slots], c)
			}
			r.mu.Lock()
			r.idle -= slots
			r.mu.Unlock()
			for _, l := range lanes {
				work <- l
			}
		}
		if wait > 0 {
			r.idleFor(ctx, wait, notified)
		}
	}
}

// slotLoop runs claims handed to it until the claimer stops. Over a queue
// that can (CompleteClaimer), a slot completing its task claims its next
// one in the same write, and runs it at once without going idle; over
// one that can complete several in a write, with Config.ClaimAhead, it
// runs a lane of tasks claimed ahead (ahead.go).
func (r *Runner) slotLoop(work <-chan []model.Claimed, drain, abandon <-chan struct{}) {
	cc, refills := r.cfg.Queue.(CompleteClaimer)
	refills = refills && cc.ClaimsOnCompletion()
	ahead := r.claimsAhead() > 0
	for claimed := range work {
		l := &lane{}
		s := newSlot(r.cfg, claimed[0], r.cfg.Clock.Now())
		r.track(s, true)
		r.take(l, claimed[1:])
		for {
			if refills {
				s.refill = func() (model.ClaimRequest, bool) { return r.refillRequest(s) }
			}
			if ahead {
				s.with = l.held
				s.hold = func() bool { return r.holds(l) }
			}
			r.drive(s, drain, abandon, l)
			r.awaitLingering(s, abandon)
			if s.holding {
				r.hold(l, s)
			} else if len(l.held) > 0 {
				r.settleHeld(l, s, drain, abandon)
			}
			r.take(l, s.refilled)
			if len(l.ahead) == 0 {
				r.track(s, false)
				break
			}
			next := newSlot(r.cfg, l.nextOf(), r.cfg.Clock.Now())
			r.handOver(s, next)
			s = next
		}
	}
}

// claimsAhead is how many tasks a slot claims ahead of the one it runs:
// Config.ClaimAhead where the queue can complete several claims in one
// write, claims on completion and says claiming ahead pays, none
// otherwise.
func (r *Runner) claimsAhead() int {
	ec, ok := r.cfg.Queue.(EachCompleteClaimer)
	if !ok || !ec.ClaimsOnCompletion() || !ec.ClaimsAhead() {
		return 0
	}
	return r.cfg.ClaimAhead
}

// refillRequest says whether slot s, about to complete its task, may claim
// its next one in the same write, and the claim to ask for: one task, as
// the claimer would for one free slot (see claimer.room), with the unspent
// budget and the failing heartbeats of the other slots, and nothing once
// the shutdown has begun.
func (r *Runner) refillRequest(s *Slot) (model.ClaimRequest, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.draining {
		return model.ClaimRequest{}, false
	}
	failing := false
	var exposure int64
	for other, f := range r.hbFailing {
		failing = failing || (f && other != s)
	}
	for other, e := range r.exposure {
		if other != s {
			exposure += e
		}
	}
	if r.claimer.room(1, failing, exposure) == 0 {
		return model.ClaimRequest{}, false
	}
	return model.ClaimRequest{Worker: r.cfg.ID, Max: 1, Lease: r.cfg.Lease, Kinds: r.cfg.kinds}, true
}

// handOver records slot s, whose completing write claimed the task next
// runs, ending and next taking its place: the slot stays busy, and the
// claimer is not woken. A claim that arrives after the shutdown grace has
// ended is left at once.
func (r *Runner) handOver(s, next *Slot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !s.holding {
		delete(r.held, s.claim.TaskID)
	}
	delete(r.exposure, s)
	delete(r.hbFailing, s)
	if r.gaveUp {
		return // next was left when it was taken (take)
	}
	r.held[next.claim.TaskID] = next.claim
	r.exposure[next] = next.task.CostBudget - next.task.CostUsed
}

// track records a slot taking or ending a claim.
func (r *Runner) track(s *Slot, holding bool) {
	r.mu.Lock()
	if holding {
		r.held[s.claim.TaskID] = s.claim
		r.exposure[s] = s.task.CostBudget - s.task.CostUsed
	} else {
		if r.draining && !r.gaveUp && s.Left() != "" {
			r.left = append(r.left, LeftClaim{Claim: s.claim, Why: s.Left()})
		}
		delete(r.held, s.claim.TaskID)
		delete(r.exposure, s)
		delete(r.hbFailing, s)
		r.idle++
	}
	r.mu.Unlock()
	if !holding {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// awaitLingering waits, before the slot takes other work, for the handler
// of a run its claim left behind to return (its context is cancelled), so
// that no more handlers run than the worker has slots; abandon ends the
// wait.
func (r *Runner) awaitLingering(s *Slot, abandon <-chan struct{}) {
	run := s.Lingering()
	if run == nil {
		return
	}
	r.cfg.Logger.Info("waiting for the handler of a claim that ended", "worker", r.cfg.ID, "task_id", s.claim.TaskID,
		"attempt", s.claim.Attempt, "fence", s.claim.Fence, "step", run.Index)
	select {
	case <-run.Done():
	case <-abandon:
	}
}

// drive steps one claim until it is over, sleeping until the slot is next
// ready or its step's run ends; when drain closes it asks the slot to
// finish its run and effect in flight and give the claim back, and when
// abandon closes (the grace is over) it stops at once, leaving the claim
// and cancelling its run with ErrShutdown.
func (r *Runner) drive(s *Slot, drain, abandon <-chan struct{}, l *lane) {
	ctx := context.Background()
	wake := drain
	for !s.Done() {
		select {
		case <-abandon:
			s.abandon()
			return
		default:
		}
		select {
		case <-drain:
			if !s.draining {
				s.drain()
				wake = abandon
			}
			if l.pending() {
				r.flush(l, drain, abandon)
				s.with = nil
			}
		default:
		}
		now := r.cfg.Clock.Now()
		if l.pending() && !now.Before(l.due(r.cfg.Heartbeat)) {
			r.flush(l, drain, abandon)
			s.with = nil
		}
		if wait := s.ReadyAt().Sub(now); wait > 0 {
			if l.pending() {
				wait = min(wait, l.due(r.cfg.Heartbeat).Sub(now))
			}
			var ended <-chan struct{}
			if run := s.Running(); run != nil {
				ended = run.Done()
			}
			r.sleep(wait, wake, ended)
			continue
		}
		rep := s.Step(ctx)
		r.mu.Lock()
		r.hbFailing[s] = s.heartbeatFailing
		r.exposure[s] = s.task.CostBudget - s.task.CostUsed
		r.mu.Unlock()
		if rep.Anomaly != "" {
			r.cfg.Logger.Error("worker anomaly", "worker", r.cfg.ID, "task_id", rep.TaskID, "anomaly", rep.Anomaly)
		}
		r.report(rep)
	}
}

// housekeep runs the reaper and the scheduler until stop closes.
func (r *Runner) housekeep(stop <-chan struct{}) {
	ctx := context.Background()
	for r.sleep(r.opts.HousekeepingEvery, stop, nil) {
		if res, err := r.opts.Housekeeper.Reap(ctx); err != nil {
			r.cfg.Logger.Warn("reap failed", "worker", r.cfg.ID, "error", err.Error())
		} else if res.Expired+res.Deadlines > 0 {
			r.cfg.Logger.Info("reaped", "worker", r.cfg.ID, "expired", res.Expired, "deadlines", res.Deadlines)
		}
		if res, err := r.opts.Housekeeper.EnqueueDue(ctx); err != nil {
			r.cfg.Logger.Warn("enqueue due runs failed", "worker", r.cfg.ID, "error", err.Error())
		} else if res.Enqueued > 0 || res.Collapsed > 0 {
			r.cfg.Logger.Info("periodic runs enqueued", "worker", r.cfg.ID, "enqueued", res.Enqueued,
				"collapsed", res.Collapsed, "refused", res.Refused)
		}
		if p, ok := r.opts.Housekeeper.(Pruner); ok {
			if res, err := p.PruneDue(ctx); err != nil {
				r.cfg.Logger.Warn("prune failed", "worker", r.cfg.ID, "error", err.Error())
			} else if res.Transactions > 0 {
				r.cfg.Logger.Info("pruned", "worker", r.cfg.ID, "tasks", res.TaskCount(), "events", res.Events,
					"tombstones", res.Tombstones, "expired_tombstones", res.Expired)
			}
		}
	}
}

package worker

import (
	"context"
	"sync"
	"time"

	"github.com/leasehold/leasehold/model"
)

// Housekeeper is the queue housekeeping a live worker also runs: the
// reaper and the periodic scheduler. *queue.Queue implements it.
type Housekeeper interface {
	Reap(ctx context.Context) (model.ReapResult, error)
	EnqueueDue(ctx context.Context) (model.EnqueueResult, error)
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
	r := &Runner{cfg: &cfg, opts: opts, idle: cfg.Concurrency,
		exposure: map[*Slot]int64{}, hbFailing: map[*Slot]bool{}, held: map[string]model.Claim{},
		wake: make(chan struct{}, 1)}
	r.claimer.cfg = r.cfg
	return r, nil
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
// finishes each claim; it returns once every slot is done. Queue calls use
// a context that is never cancelled, so a shutdown never abandons a write
// half way (database/sql rolls back cancelled transactions asynchronously).
func (r *Runner) Run(ctx context.Context) error {
	work := make(chan model.Claimed)
	drain := make(chan struct{})
	var slots, helpers sync.WaitGroup
	for i := 0; i < r.cfg.Concurrency; i++ {
		slots.Add(1)
		go func() {
			defer slots.Done()
			r.slotLoop(work, drain)
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
	r.claimLoop(ctx, work)
	r.cfg.Logger.Info("worker shutting down", "worker", r.cfg.ID, "claims", len(r.Claims()))
	close(drain)
	close(work)
	slots.Wait()
	close(stopHelpers)
	helpers.Wait()
	r.cfg.Logger.Info("worker stopped", "worker", r.cfg.ID)
	return nil
}

func (r *Runner) report(rep Report) {
	if r.opts.OnReport != nil {
		r.opts.OnReport(rep)
	}
}

// sleep waits for d on the runner's clock, or until stop closes; it
// reports whether it slept the whole time.
func (r *Runner) sleep(d time.Duration, stop <-chan struct{}) bool {
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

// claimLoop claims while ctx lives and hands each claim to a slot. It
// sleeps while there is no room (until a slot frees, or PollMax) and for
// the wait the claimer asks for (polling backoff, storage backoff), woken
// early when a slot frees.
func (r *Runner) claimLoop(ctx context.Context, work chan<- model.Claimed) {
	for ctx.Err() == nil {
		wait := r.cfg.PollMax
		if room := r.room(); room > 0 {
			var rep Report
			var claimed []model.Claimed
			rep, claimed, wait = r.claimer.claim(context.Background(), room)
			r.report(rep)
			r.mu.Lock()
			r.idle -= len(claimed)
			r.mu.Unlock()
			for _, c := range claimed {
				work <- c
			}
		}
		if wait > 0 {
			select {
			case <-ctx.Done():
			case <-r.wake:
			case <-r.cfg.Clock.After(wait):
			}
		}
	}
}

// slotLoop runs claims handed to it until the claimer stops.
func (r *Runner) slotLoop(work <-chan model.Claimed, drain <-chan struct{}) {
	for c := range work {
		s := newSlot(r.cfg, c, r.cfg.Clock.Now())
		r.track(s, true)
		r.drive(s, drain)
		r.track(s, false)
	}
}

// track records a slot taking or ending a claim.
func (r *Runner) track(s *Slot, holding bool) {
	r.mu.Lock()
	if holding {
		r.held[s.claim.TaskID] = s.claim
		r.exposure[s] = s.task.CostBudget - s.task.CostUsed
	} else {
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

// drive steps one claim until it is over, sleeping until the slot is next
// ready; when drain closes it asks the slot to finish its effect in flight
// and give the claim back.
func (r *Runner) drive(s *Slot, drain <-chan struct{}) {
	ctx := context.Background()
	for !s.Done() {
		select {
		case <-drain:
			s.drain()
			drain = nil
		default:
		}
		if wait := s.ReadyAt().Sub(r.cfg.Clock.Now()); wait > 0 {
			r.sleep(wait, drain)
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
	for r.sleep(r.opts.HousekeepingEvery, stop) {
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
	}
}

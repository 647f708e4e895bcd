package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/reports"
	"github.com/leasehold/leasehold/worker"
	"github.com/leasehold/leasehold/worker/workertest"
)

// Bounds of a run: every count the command line takes and every wait.
const (
	KillsMax = 200
	StopsMax = 50
	TasksMax = 1000

	drainMaxDefault = 60 * time.Second
	submitRetries   = 5
	callerTick      = 100 * time.Millisecond
	drainPoll       = 250 * time.Millisecond
	shutdownGrace   = 5 * time.Second
	firstAttackWait = 1500 * time.Millisecond
)

// callerActor is the name the caller's actions are recorded under.
const callerActor = "chaos-caller"

// ErrConfig is returned for a configuration Run refuses.
var ErrConfig = errors.New("chaos: bad configuration")

// Config is one run's configuration. Binary and Dir are required; zero
// values elsewhere take the defaults noted.
type Config struct {
	// Binary is the leasehold binary the workers run from.
	Binary string
	// Dir is the run's directory: it must exist and be empty. Each lane
	// gets a folder in it; result.json and index.html go at its top.
	Dir   string
	Seed  uint64
	Kills int // SIGKILLs in all, aimed ones included
	Stops int // SIGSTOP past the lease, then SIGCONT
	Tasks int // tasks submitted, spread over the lanes
	// Aimed is how many of the kills are aimed between an effect's intent
	// and its receipt (default: a quarter of Kills, at least one when
	// Kills is at least two).
	Aimed int
	// Kinds are the service kinds, one lane each (default: all four).
	Kinds          []worker.ServiceKind
	WorkersPerLane int           // default 2
	Concurrency    int           // tasks per worker, default 3
	Lease          time.Duration // default 2s
	Heartbeat      time.Duration // default 500ms
	AttemptsMax    int           // default 5
	DrainMax       time.Duration // default 60s
	// Log receives the progress lines (nil: discarded).
	Log io.Writer
	// Versions are the build's, for the page.
	Versions reports.Versions
}

func (c *Config) defaults() error {
	if c.Binary == "" || c.Dir == "" {
		return fmt.Errorf("%w: Binary and Dir are required", ErrConfig)
	}
	switch {
	case c.Kills < 0 || c.Kills > KillsMax:
		return fmt.Errorf("%w: kills must be between 0 and %d, got %d", ErrConfig, KillsMax, c.Kills)
	case c.Stops < 0 || c.Stops > StopsMax:
		return fmt.Errorf("%w: stops must be between 0 and %d, got %d", ErrConfig, StopsMax, c.Stops)
	case c.Tasks < 1 || c.Tasks > TasksMax:
		return fmt.Errorf("%w: tasks must be between 1 and %d, got %d", ErrConfig, TasksMax, c.Tasks)
	case c.Aimed < 0 || c.Aimed > c.Kills:
		return fmt.Errorf("%w: aimed kills must be between 0 and the kills (%d), got %d", ErrConfig, c.Kills, c.Aimed)
	}
	if c.Aimed == 0 && c.Kills >= 2 {
		c.Aimed = max(1, c.Kills/4)
	}
	if len(c.Kinds) == 0 {
		c.Kinds = worker.ServiceKinds()
	}
	setDefault(&c.WorkersPerLane, 2)
	setDefault(&c.Concurrency, 3)
	setDefault(&c.AttemptsMax, 5)
	setDefault(&c.Lease, 2*time.Second)
	setDefault(&c.Heartbeat, 500*time.Millisecond)
	setDefault(&c.DrainMax, drainMaxDefault)
	if c.Log == nil {
		c.Log = io.Discard
	}
	return nil
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// run is one chaos run in progress.
type run struct {
	cfg   Config
	start time.Time
	lanes []*lane

	mu  sync.Mutex // guards res
	res Result
	// records are what the check read back, for the page.
	records []laneRecord
	// attacksDone and attacksPlanned pace the caller's submits.
	attacksDone, attacksPlanned atomic.Int64
}

// progress is the share of the attack plan done, 1 once it is over.
func (r *run) progress() float64 {
	planned := r.attacksPlanned.Load()
	if planned == 0 {
		return 0
	}
	return float64(r.attacksDone.Load()) / float64(planned)
}

// lane is one service kind's database, ledger and workers.
type lane struct {
	run        *run
	kind       string
	dir        string
	dbPath     string
	ledgerPath string
	q          *queue.Queue       // the caller's handle, through the Go API
	svc        *workertest.Ledger // the ledger, for holds and the check
	procs      []*proc

	mu       sync.Mutex // guards accepted
	accepted []string
}

// Run runs the kill storm and its check, writes Dir/result.json and
// Dir/index.html, and returns the result. An error means the run could not
// be carried out or reported; a violation found is not an error: it makes
// Result.Pass false.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.defaults(); err != nil {
		return Result{}, err
	}
	r := &run{cfg: cfg, start: time.Now()}
	r.res = Result{Kind: ResultKind, Seed: cfg.Seed, Started: r.start.UTC().Format(time.RFC3339Nano), Machine: machine(),
		Settings: Settings{Kills: cfg.Kills, Stops: cfg.Stops, Tasks: cfg.Tasks, Aimed: cfg.Aimed, WorkersPerLane: cfg.WorkersPerLane,
			Concurrency: cfg.Concurrency, LeaseMs: cfg.Lease.Milliseconds(), HeartbeatMs: cfg.Heartbeat.Milliseconds(),
			AttemptsMax: cfg.AttemptsMax, Synchronous: queue.SynchronousFull, JournalMode: "WAL"},
		Counts: Counts{States: map[string]int{}, LateCalls: map[string]int{}}}
	for _, k := range cfg.Kinds {
		r.res.Settings.Lanes = append(r.res.Settings.Lanes, string(k))
	}
	fmt.Fprintf(cfg.Log, "chaos: seed %d; %d kills (%d aimed), %d stops, %d tasks over %d lanes (%v), %d workers each; live: real processes, wall clock\n",
		cfg.Seed, cfg.Kills, cfg.Aimed, cfg.Stops, cfg.Tasks, len(cfg.Kinds), cfg.Kinds, cfg.WorkersPerLane)
	// A result that says the run did not finish, until the real one
	// replaces it: a run that is interrupted leaves a directory the next
	// run may empty.
	unfinished := r.res
	unfinished.Failure = "the run did not finish"
	if err := writeResult(filepath.Join(cfg.Dir, "result.json"), unfinished); err != nil {
		return r.res, err
	}
	defer r.close()
	failure := r.play(ctx)
	if failure != nil {
		r.res.Failure = failure.Error()
		fmt.Fprintf(cfg.Log, "chaos: the run could not finish its plan: %v\n", failure)
	}
	r.shutdown()
	checkStart := time.Now()
	if err := r.check(ctx); err != nil {
		return r.res, err
	}
	r.res.Durations.Check = time.Since(checkStart).Milliseconds()
	r.res.Durations.Total = time.Since(r.start).Milliseconds()
	c, s := r.res.Counts, r.res.Settings
	r.res.Pass = failure == nil && r.res.Findings.Clean() && c.Kills == s.Kills && c.Stops == s.Stops && c.Tasks == s.Tasks
	if err := writeResult(filepath.Join(cfg.Dir, "result.json"), r.res); err != nil {
		return r.res, err
	}
	if err := writePage(filepath.Join(cfg.Dir, "index.html"), r); err != nil {
		return r.res, err
	}
	return r.res, nil
}

// play sets the lanes up, attacks them while the caller works, and drains.
func (r *run) play(ctx context.Context) error {
	if err := r.setup(ctx); err != nil {
		return err
	}
	workload := planWorkload(rand.New(rand.NewPCG(r.cfg.Seed, 1)), r.cfg.Tasks, len(r.lanes))
	callerCtx, stopCaller := context.WithCancel(ctx)
	c := newCaller(r, workload)
	callerDone := make(chan struct{})
	go func() {
		defer close(callerDone)
		c.loop(callerCtx)
	}()
	defer func() {
		stopCaller()
		<-callerDone
	}()
	attackStart := time.Now()
	err := r.attack(ctx, rand.New(rand.NewPCG(r.cfg.Seed, 2)))
	r.attacksDone.Store(r.attacksPlanned.Load()) // the rest of the workload goes in now
	r.res.Durations.Attack = time.Since(attackStart).Milliseconds()
	if err != nil {
		return err
	}
	drainStart := time.Now()
	err = r.drain(ctx, c)
	r.res.Durations.Drain = time.Since(drainStart).Milliseconds()
	return err
}

func (r *run) setup(ctx context.Context) error {
	for i, kind := range r.cfg.Kinds {
		l := &lane{run: r, kind: string(kind), dir: filepath.Join(r.cfg.Dir, string(kind))}
		l.dbPath, l.ledgerPath = filepath.Join(l.dir, "leasehold.db"), filepath.Join(l.dir, "service.db")
		if err := os.MkdirAll(l.dir, 0o755); err != nil {
			return fmt.Errorf("lane %s: %w", kind, err)
		}
		q, err := queue.Open(ctx, queue.Options{Path: l.dbPath, Clock: clockwork.NewRealClock(),
			IDs: model.NewSeededIDs(r.cfg.Seed*31 + uint64(i)), Rand: rand.New(rand.NewPCG(r.cfg.Seed, 3+uint64(i))),
			Synchronous: queue.SynchronousFull, BusyTimeout: 10 * time.Second, Migrate: queue.MigrateNew})
		if err != nil {
			return fmt.Errorf("lane %s: open the database: %w", kind, err)
		}
		l.q = q
		r.lanes = append(r.lanes, l)
		if i == 0 {
			r.res.Pragmas = q.Pragmas()
		}
		limits, _, err := q.Limits(ctx)
		if err != nil {
			return fmt.Errorf("lane %s: read the limits: %w", kind, err)
		}
		limits.AttemptsMax = r.cfg.AttemptsMax
		if err := q.SetLimits(model.WithScope(ctx, model.ScopeOperate), limits, callerActor); err != nil {
			return fmt.Errorf("lane %s: set the limits: %w", kind, err)
		}
		if l.svc, err = workertest.OpenLedger(l.ledgerPath, kind, clockwork.NewRealClock()); err != nil {
			return fmt.Errorf("lane %s: %w", kind, err)
		}
		for w := 1; w <= r.cfg.WorkersPerLane; w++ {
			p := &proc{lane: l, name: fmt.Sprintf("%s-w%d", kind, w)}
			l.procs = append(l.procs, p)
			if err := p.start(); err != nil {
				return err
			}
		}
	}
	return nil
}

// drain brings every worker back, then waits (bounded) until the caller
// has submitted everything and every accepted task has settled.
func (r *run) drain(ctx context.Context, c *caller) error {
	for _, l := range r.lanes {
		for _, p := range l.procs {
			if err := r.revive(p); err != nil {
				return err
			}
		}
	}
	r.moment("", "", MomentPhase, "attacks over; draining")
	deadline := time.Now().Add(r.cfg.DrainMax)
	for {
		open, err := r.unsettled(ctx)
		if err != nil {
			return err
		}
		if open == 0 && c.finished() {
			r.moment("", "", MomentPhase, "every accepted task has settled")
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("drain: %d accepted tasks still unsettled after %s", open, r.cfg.DrainMax)
		}
		if err := sleep(ctx, drainPoll); err != nil {
			return err
		}
	}
}

// revive continues a stopped worker and restarts a dead one.
func (r *run) revive(p *proc) error {
	p.mu.Lock()
	stopped := p.stopped
	p.mu.Unlock()
	if stopped {
		if err := p.signal(syscallCont); err != nil {
			return err
		}
		r.moment(p.lane.kind, p.name, MomentCont, "SIGCONT worker "+p.name)
	}
	if !p.alive() {
		r.count(func(c *Counts) { c.Restarts++ })
		return p.start()
	}
	return nil
}

// unsettled counts the accepted tasks not yet terminal or in needs_review.
func (r *run) unsettled(ctx context.Context) (int, error) {
	open := 0
	for _, l := range r.lanes {
		tasks, err := l.q.List(ctx, model.ListFilter{Limit: model.ListLimitMax})
		if err != nil {
			return 0, fmt.Errorf("lane %s: %w", l.kind, err)
		}
		for _, t := range tasks {
			if !settled(t.State) {
				open++
			}
		}
	}
	return open, nil
}

// shutdown stops every worker for good.
func (r *run) shutdown() {
	var wg sync.WaitGroup
	for _, l := range r.lanes {
		for _, p := range l.procs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.shutdown(shutdownGrace)
			}()
		}
	}
	wg.Wait()
}

func (r *run) close() {
	r.shutdown()
	for _, l := range r.lanes {
		if l.q != nil {
			l.q.Close()
		}
		if l.svc != nil {
			l.svc.Close()
		}
	}
}

func (r *run) since() int64 { return time.Since(r.start).Milliseconds() }

// moment records one thing done or seen, and prints it.
func (r *run) moment(laneKind, worker, kind, detail string) {
	at := r.since()
	r.mu.Lock()
	r.res.Timeline = append(r.res.Timeline, Moment{AtMs: at, Lane: laneKind, Worker: worker, Kind: kind, Detail: detail})
	r.mu.Unlock()
	prefix := ""
	if laneKind != "" {
		prefix = laneKind + ": "
	}
	fmt.Fprintf(r.cfg.Log, "[%7.2fs] %s%s\n", float64(at)/1000, prefix, detail)
}

// count changes the counts under the lock.
func (r *run) count(f func(c *Counts)) {
	r.mu.Lock()
	f(&r.res.Counts)
	r.mu.Unlock()
}

func (l *lane) accept(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range l.accepted {
		if a == id {
			return false
		}
	}
	l.accepted = append(l.accepted, id)
	return true
}

func (l *lane) acceptedIDs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.accepted...)
}

func (l *lane) workers() []string {
	out := make([]string, len(l.procs))
	for i, p := range l.procs {
		out[i] = p.name
	}
	return out
}

func machine() map[string]string {
	host, _ := os.Hostname()
	return map[string]string{"hostname": host, "goos": runtime.GOOS, "goarch": runtime.GOARCH,
		"cpus": strconv.Itoa(runtime.NumCPU()), "go": runtime.Version()}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

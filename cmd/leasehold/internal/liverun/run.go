package liverun

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/scenarios"
)

// Config is what a live run needs from the command that starts it.
type Config struct {
	Dir string // the run's directory, empty: it receives the database, the ledger and the worker logs
	// DB, when set, is a PostgreSQL database for the run to fill (see
	// FreshPostgres) instead of a SQLite file in Dir.
	DB      string
	Self    string    // the leasehold binary the workers run
	Stdout  io.Writer // one progress line per moment
	IDs     model.IDSource
	Commit  string
	Machine map[string]string
}

// Timing of the live run. The scenario's own lease, heartbeat and step
// durations run as written (DurationScale 1): the Portfolio's longest
// task is cancelled at its first step, so the run stays near a minute.
const (
	DurationScale = 1
	storyMax      = 15 * time.Second       // one story's longest wait
	pollEvery     = 100 * time.Millisecond // how often a waiting story reads the task
	callerBusy    = 500 * time.Millisecond // the caller's busy timeout, so that a locked database is an error soon
	operator      = "demo-operator"
)

// proc is a worker process the run started.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

type run struct {
	cfg Config
	ctx context.Context
	sc  scenarios.Scenario
	db  string
	// q is the run's own view of the database, for its checks: the
	// metrics sampler, the audit trail and each task's final record. Every
	// action of the caller goes through c instead.
	q     *queue.Queue
	c     *caller
	start time.Time

	mu       sync.Mutex
	procs    map[string]*proc
	env      map[string][]string // each worker's extra environment, kept across restarts
	res      Result
	ids      map[string]string
	reqs     map[string]model.SubmitRequest
	sampling chan struct{}  // closed to stop the sampler
	sampler  sync.WaitGroup // the sampler, waited for before the result is read
}

// Machine describes the machine the run is on.
func Machine() map[string]string {
	host, _ := os.Hostname()
	return map[string]string{"hostname": host, "goos": runtime.GOOS, "goarch": runtime.GOARCH,
		"cpus": strconv.Itoa(runtime.NumCPU()), "go": runtime.Version()}
}

// Run plays scenarios.Portfolio and the live fault stories and returns
// what it observed. A run that could not play to the end says so as a
// failed outcome; Run leaves no worker process running.
func Run(ctx context.Context, cfg Config) Result {
	sc := scenarios.Portfolio()
	db := cfg.DB
	if db == "" {
		db = filepath.Join(cfg.Dir, "leasehold.db")
	}
	r := &run{cfg: cfg, ctx: ctx, sc: sc, db: db, start: time.Now(),
		procs: map[string]*proc{}, env: map[string][]string{}, ids: map[string]string{},
		reqs: map[string]model.SubmitRequest{}, sampling: make(chan struct{})}
	r.res = Result{Kind: Kind, Scenario: sc.Name, Started: r.start.UTC(), Machine: cfg.Machine, Commit: cfg.Commit, IDs: r.ids,
		Settings: map[string]string{"lease": sc.Lease.String(), "heartbeat": sc.Heartbeat.String(),
			"workers": strconv.Itoa(sc.Workers), "concurrency": strconv.Itoa(sc.Concurrency), "service_kind": "fenced",
			"duplicate":      "w2 delivers every completion twice (" + DuplicateEnv + "=complete)",
			"duration_scale": strconv.Itoa(DurationScale) + " (the scenario's duration_ms run as written)"}}
	for k, v := range r.storeSettings() {
		r.res.Settings[k] = v
	}
	err := r.play()
	r.stopSampling()
	if err != nil {
		r.outcome(StoryRan, "", "the run played to the end", "every story played out", err.Error(), false)
	}
	if r.q != nil {
		r.finish()
	}
	r.stopAll()
	if r.q != nil {
		r.q.Close()
	}
	r.res.DurationMs = r.since()
	r.res.Pass = len(r.res.Outcomes) > 0
	for _, o := range r.res.Outcomes {
		r.res.Pass = r.res.Pass && o.Pass
	}
	return r.res
}

func (r *run) since() int64 { return time.Since(r.start).Milliseconds() }

// moment records m on the timeline and prints it.
func (r *run) moment(m Moment) {
	m.AtMs = r.since()
	r.mu.Lock()
	r.res.Timeline = append(r.res.Timeline, m)
	r.mu.Unlock()
	fmt.Fprintf(r.cfg.Stdout, "[%6.2fs] %s\n", float64(m.AtMs)/1000, m)
}

func (r *run) outcome(story Story, task, name, expected, observed string, pass bool) {
	r.res.Outcomes = append(r.res.Outcomes, Outcome{Story: story, Task: task, Name: name, Expected: expected,
		Observed: observed, Pass: pass, AtMs: r.since()})
}

var ended = []model.State{model.Completed, model.Failed, model.Cancelled, model.NeedsReview}

func (r *run) startWorker(name string, env ...string) error {
	r.mu.Lock()
	r.env[name] = env
	r.mu.Unlock()
	dbArgs, dbEnv := r.dbArgs()
	p, err := r.startProc(name, append(append([]string{"worker"}, dbArgs...), "--id", name, "--concurrency", strconv.Itoa(r.sc.Concurrency),
		"--lease", r.sc.Lease.String(), "--heartbeat", r.sc.Heartbeat.String(), "--busy-timeout", "300ms",
		"--service-kind", "fenced", "--service-db", filepath.Join(r.cfg.Dir, "service.db")), append(env, dbEnv...))
	if err != nil {
		return err
	}
	r.moment(Moment{Kind: WorkerStarted, Worker: name, PID: p.cmd.Process.Pid})
	return nil
}

// startProc starts this binary with args and env added to the run's
// environment, its output appended to NAME.log in the run's directory.
func (r *run) startProc(name string, args, env []string) (*proc, error) {
	log, err := os.OpenFile(filepath.Join(r.cfg.Dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0o644) // a link there is refused, not written through
	if err != nil {
		return nil, fmt.Errorf("%s's log: %w", name, err)
	}
	cmd := exec.Command(r.cfg.Self, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	r.mu.Lock()
	r.procs[name] = p
	r.mu.Unlock()
	return p, nil
}

// restart starts a worker again with the environment it last had.
func (r *run) restart(name string) error {
	r.mu.Lock()
	env := r.env[name]
	r.mu.Unlock()
	return r.startWorker(name, env...)
}

func (r *run) proc(name string) *proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.procs[name]
}

var signalNames = map[syscall.Signal]string{syscall.SIGTERM: "SIGTERM", syscall.SIGKILL: "SIGKILL",
	syscall.SIGSTOP: "SIGSTOP", syscall.SIGCONT: "SIGCONT"}

// signal sends sig to a worker and, for SIGTERM and SIGKILL, waits for it
// to exit.
func (r *run) signal(name string, sig syscall.Signal) error {
	p := r.proc(name)
	if p == nil {
		return fmt.Errorf("no worker %s", name)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %s to %s: %w", sig, name, err)
	}
	r.moment(Moment{Kind: WorkerSignalled, Worker: name, PID: p.cmd.Process.Pid, Signal: signalNames[sig]})
	if sig == syscall.SIGTERM || sig == syscall.SIGKILL {
		select {
		case <-p.done:
			r.moment(Moment{Kind: WorkerExited, Worker: name, PID: p.cmd.Process.Pid})
		case <-time.After(storyMax):
			return fmt.Errorf("worker %s did not exit after %s", name, sig)
		}
	}
	return nil
}

// stopAll leaves no process running, whatever happened: the workers
// first, then the server.
func (r *run) stopAll() {
	r.mu.Lock()
	procs := make([]*proc, 0, len(r.procs))
	for _, p := range r.procs {
		procs = append(procs, p)
	}
	r.mu.Unlock()
	sort.Slice(procs, func(i, j int) bool { return procs[j].name == "serve" && procs[i].name != "serve" })
	for _, p := range procs {
		r.stop(p)
	}
}

// stop ends a process: SIGTERM (after SIGCONT, should it be stopped),
// then SIGKILL if it has not exited within five seconds.
func (r *run) stop(p *proc) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// startSampling starts the sampler.
func (r *run) startSampling() {
	r.sampler.Add(1)
	go func() {
		defer r.sampler.Done()
		r.sample()
	}()
}

// stopSampling stops the sampler and waits for it to return, so that what
// reads the result afterwards races with nothing. Stopping a sampler
// never started returns at once.
func (r *run) stopSampling() {
	close(r.sampling)
	r.sampler.Wait()
}

// sample reads the metrics every half second until the run ends; a read
// the locked database refuses is skipped.
func (r *run) sample() {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		if m, err := r.q.Metrics(r.ctx); err == nil {
			r.mu.Lock()
			r.res.Samples = append(r.res.Samples, Sample{AtMs: r.since(), Metrics: m})
			r.mu.Unlock()
		}
		select {
		case <-r.sampling:
			return
		case <-tick.C:
		}
	}
}

// play opens the queue, starts the server and the workers and plays the scenario's
// scripts, then the live fault stories, then waits for every task to end.
func (r *run) play() error {
	q, err := queue.Open(r.ctx, queue.Options{Path: r.db, Clock: clockwork.NewRealClock(), IDs: r.cfg.IDs, BusyTimeout: callerBusy})
	if err != nil {
		return fmt.Errorf("open the queue: %w", err)
	}
	r.q = q
	r.res.Pragmas = q.Pragmas()
	if err := r.startServer(); err != nil {
		return err
	}
	if err := r.setLimits(); err != nil {
		return err
	}
	r.startSampling()
	for i := 1; i <= r.sc.Workers; i++ {
		var env []string
		if i == 2 {
			env = []string{DuplicateEnv + "=complete"}
		}
		if err := r.startWorker("w"+strconv.Itoa(i), env...); err != nil {
			return err
		}
	}
	for _, t := range r.sc.Tasks {
		if len(t.Script) == 0 || t.Script[0] != scenarios.Submit {
			r.res.NotLive = append(r.res.NotLive, fmt.Sprintf("%s: its script does not start with a submit", t.Name))
			continue
		}
		if err := r.submit(t.Name, r.request(t)); err != nil {
			return err
		}
	}
	for _, t := range r.sc.Tasks {
		if err := r.script(t); err != nil {
			return err
		}
	}
	for _, story := range []func() error{r.storyTokenBound, r.storyKill, r.storyStop, r.storyStorage} {
		if err := story(); err != nil {
			return err
		}
	}
	return r.settle()
}

// request is the task's submit request, its run_at and deadline made
// absolute from now.
func (r *run) request(t scenarios.Task) model.SubmitRequest {
	req := t.Request
	now := time.Now().UTC()
	if t.RunAt > 0 {
		req.RunAt = now.Add(t.RunAt)
	}
	if t.Deadline > 0 {
		req.Deadline = now.Add(t.Deadline)
	}
	return req
}

// script plays a task's acts after its submit, in order.
func (r *run) script(t scenarios.Task) error {
	for _, act := range t.Script[1:] {
		var err error
		switch act {
		case scenarios.Replay:
			err = r.actReplay(t)
		case scenarios.ChangePayload:
			err = r.actChangePayload(t)
		case scenarios.CancelRunning:
			err = r.actCancelRunning(t)
		case scenarios.RestartWhilePaused:
			err = r.actRestartWhilePaused(t)
		case scenarios.ApproveOutdated:
			err = r.actApproveOutdated(t)
		case scenarios.Approve:
			err = r.actApprove(t)
		default:
			r.res.NotLive = append(r.res.NotLive, fmt.Sprintf("%s: act %s is played by the simulator only (the live service and network are real, with no injector between them)", t.Name, act))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

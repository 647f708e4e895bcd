package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/worker"
)

// leaseholdUsers is how many users the jobs are spread over; each runs
// under a per-user running limit (leaseholdUserRunningMax) that the
// claims check but that never binds, so the limit is on without shaping
// the figures. River has no such limit; the PostgreSQL work cells can
// also run leasehold without it (-pg-unlimited) to show what it costs.
const (
	leaseholdUsers          = 4
	leaseholdUserRunningMax = 50
)

// leasehold runs the real worker runtime (worker.Runner) over a real
// queue, with fencing, leases, per-user limits, events and metrics as
// they always are: none can be switched off. On PostgreSQL (pg) the path
// is the run's URL.
type leasehold struct {
	label   string
	options func(*queue.Options) // the variant's options (grouping)
	pg      bool
	// unlimited runs without the per-user running limit.
	unlimited bool
}

func (l leasehold) name() string   { return l.label }
func (l leasehold) postgres() bool { return l.pg }

func (l leasehold) open(ctx context.Context, path, sync string, migrate queue.MigrateMode) (*queue.Queue, error) {
	return l.openCounted(ctx, path, sync, migrate, nil)
}

// openCounted is open with pages, when set, counting the pages each
// SQLite commit writes.
func (l leasehold) openCounted(ctx context.Context, path, sync string, migrate queue.MigrateMode, pages *pageCounter) (*queue.Queue, error) {
	o := queue.Options{Path: path, Clock: clockwork.NewRealClock(), IDs: model.NewSeededIDs(uint64(time.Now().UnixNano())),
		Synchronous: sync, Migrate: migrate}
	if l.pg {
		o.Synchronous, o.MaxConns = "", pgConns
	} else if pages != nil {
		o.Driver = pages
	}
	if l.options != nil {
		l.options(&o)
	}
	return queue.Open(ctx, o)
}

func payload(steps int) string {
	if steps == 0 {
		return `{"steps":[]}`
	}
	s := `{"steps":[`
	for i := range steps {
		if i > 0 {
			s += ","
		}
		s += `{"cost":1}`
	}
	return s + "]}"
}

func leaseholdRequest(i, steps int) model.SubmitRequest {
	return model.SubmitRequest{User: fmt.Sprintf("u%d", i%leaseholdUsers), Key: fmt.Sprintf("k%d", i),
		Payload: payload(steps), CostBudget: int64(steps) + 1, StepsMax: steps + 1}
}

// setLimits turns the per-user running limit on, unless l runs without
// it.
func (l leasehold) setLimits(ctx context.Context, q *queue.Queue) error {
	if l.unlimited {
		return nil
	}
	limits, _, err := q.Limits(ctx)
	if err != nil {
		return err
	}
	limits.UserRunningMax = leaseholdUserRunningMax
	return q.SetLimits(ctx, limits, "bench")
}

func (l leasehold) seed(ctx context.Context, path string, n, steps int) error {
	q, err := l.open(ctx, path, "NORMAL", queue.MigrateAll)
	if err != nil {
		return err
	}
	defer q.Close()
	if err := l.setLimits(ctx, q); err != nil {
		return err
	}
	return submitMany(ctx, q, 0, n, steps)
}

// submitMany submits n requests, the first being request first, with
// SubmitMany, in batches of at most queue.SubmitBatchMax.
func submitMany(ctx context.Context, q *queue.Queue, first, n, steps int) error {
	for start := first; start < first+n; start += queue.SubmitBatchMax {
		var reqs []model.SubmitRequest
		for i := start; i < min(first+n, start+queue.SubmitBatchMax); i++ {
			reqs = append(reqs, leaseholdRequest(i, steps))
		}
		if _, err := q.SubmitMany(ctx, reqs); err != nil {
			return err
		}
	}
	return nil
}

// runCounts is what a worker runtime reported: writes that failed in
// storage (the worker retries them: busy timeouts, mostly), and the claim
// writes that took tasks and how many they took.
type runCounts struct {
	retried, claimWrites, claimed int64
}

// runner starts a worker runtime named id over q and calls done for each
// task it completes; stop ends it gracefully and returns its counts and the first
// anomaly or failure seen.
func runner(q *queue.Queue, id string, workers int, done func()) (stop func() (runCounts, error), err error) {
	var mu sync.Mutex
	var problem error
	var retried, claimWrites, claimed atomic.Int64
	cfg := worker.Config{ID: id, Queue: q, Handler: worker.Synthetic{}, Service: nopService{}, Clock: clockwork.NewRealClock(),
		Concurrency: workers, PollMin: time.Millisecond, PollMax: 10 * time.Millisecond}
	r, err := worker.NewRunner(cfg, worker.RunOptions{Housekeeper: q, OnReport: func(rep worker.Report) {
		if len(rep.Claims) > 0 {
			claimWrites.Add(1)
			claimed.Add(int64(len(rep.Claims)))
		}
		switch {
		case rep.Action == worker.ActionComplete && rep.Accepted:
			done()
		case rep.StorageError:
			retried.Add(1)
		case rep.Anomaly != "" || rep.Action == worker.ActionFail || rep.Err != nil:
			mu.Lock()
			if problem == nil {
				problem = fmt.Errorf("worker: %s", rep)
			}
			mu.Unlock()
		}
	}})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		_ = r.Run(ctx)
	}()
	return func() (runCounts, error) {
		cancel()
		<-finished
		mu.Lock()
		defer mu.Unlock()
		return runCounts{retried: retried.Load(), claimWrites: claimWrites.Load(), claimed: claimed.Load()}, problem
	}, nil
}

func (l leasehold) work(ctx context.Context, path, sync string, workers, n, steps int) (sample, error) {
	pages := &pageCounter{}
	q, err := l.openCounted(ctx, path, sync, queue.MigrateNew, pages)
	if err != nil {
		return sample{}, err
	}
	defer q.Close()
	pages0 := pages.pages.Load()
	var completed atomic.Int64
	all := make(chan struct{})
	var stop func() (runCounts, error)
	smp, err := measure(n, func() error {
		var err error
		stop, err = runner(q, "bench", workers, func() {
			if completed.Add(1) == int64(n) {
				close(all)
			}
		})
		if err != nil {
			return err
		}
		select {
		case <-all:
			return nil
		case <-time.After(10 * time.Minute):
			return errors.New("timed out")
		}
	})
	if stop != nil {
		counts, serr := stop()
		if err == nil {
			err = serr
		}
		smp.retried, smp.claimWrites, smp.claimed = int(counts.retried), counts.claimWrites, counts.claimed
	}
	if err != nil {
		return sample{}, err
	}
	groups, ops := q.GroupStats()
	if !l.pg {
		smp.pages = pages.pages.Load() - pages0
	}
	m, err := q.Metrics(ctx)
	if err != nil {
		return sample{}, err
	}
	if got := m.Depth[model.Completed]; got != int64(n) {
		return sample{}, fmt.Errorf("%d tasks completed, want %d", got, n)
	}
	smp.groups, smp.groupOps, smp.sizes = groups, ops, formatSizes(q.GroupSizes())
	smp.fused, _ = q.FusedStats()
	return smp, nil
}

func (l leasehold) intake(ctx context.Context, path, sync string, n int, bulk bool) (sample, error) {
	q, err := l.open(ctx, path, sync, queue.MigrateAll)
	if err != nil {
		return sample{}, err
	}
	defer q.Close()
	if err := l.setLimits(ctx, q); err != nil {
		return sample{}, err
	}
	smp, err := measure(n, func() error {
		if bulk {
			return submitMany(ctx, q, 0, n, 0)
		}
		for i := range n {
			if _, err := q.Submit(ctx, leaseholdRequest(i, 0)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return sample{}, err
	}
	m, err := q.Metrics(ctx)
	if err != nil {
		return sample{}, err
	}
	if got := m.Depth[model.Queued]; got != int64(n) {
		return sample{}, fmt.Errorf("%d tasks queued, want %d", got, n)
	}
	return smp, nil
}

func (l leasehold) latency(ctx context.Context, path, sync string, k int) ([]time.Duration, error) {
	q, err := l.open(ctx, path, sync, queue.MigrateAll)
	if err != nil {
		return nil, err
	}
	defer q.Close()
	if err := l.setLimits(ctx, q); err != nil {
		return nil, err
	}
	completed := make(chan struct{}, 1)
	stop, err := runner(q, "bench", 10, func() { completed <- struct{}{} })
	if err != nil {
		return nil, err
	}
	out, err := idleLatencies(k, func(i int) error {
		_, err := q.Submit(ctx, leaseholdRequest(i, 0))
		return err
	}, completed)
	if _, serr := stop(); err == nil {
		err = serr
	}
	return out, err
}

// pairedLatency is latency on two variants at once: each has its queue,
// database and runner, and job by job they take turns (which goes first
// alternates), each job submitted after the queue idled and timed from
// submit to completion, so both are measured under the same disk and
// machine. The first job of each is untimed, as in idleLatencies.
func pairedLatency(ctx context.Context, ls [2]leasehold, paths [2]string, sync string, k int) ([2][]time.Duration, error) {
	var out [2][]time.Duration
	var submits [2]func(i int) error
	var completed [2]chan struct{}
	var stops [2]func() (runCounts, error)
	defer func() {
		for _, stop := range stops {
			if stop != nil {
				stop() // its errors are reported by the jobs that never complete
			}
		}
	}()
	for j, l := range ls {
		q, err := l.open(ctx, paths[j], sync, queue.MigrateAll)
		if err != nil {
			return out, err
		}
		defer q.Close()
		if err := l.setLimits(ctx, q); err != nil {
			return out, err
		}
		done := make(chan struct{}, 1)
		stop, err := runner(q, "bench", 10, func() { done <- struct{}{} })
		if err != nil {
			return out, err
		}
		stops[j] = stop
		completed[j] = done
		submits[j] = func(i int) error {
			_, err := q.Submit(ctx, leaseholdRequest(i, 0))
			return err
		}
	}
	for i := range k + 1 {
		for t := range 2 {
			j := (i + t) % 2
			time.Sleep(idleFor)
			t0 := time.Now()
			if err := submits[j](i); err != nil {
				return out, fmt.Errorf("%s: %w", ls[j].name(), err)
			}
			select {
			case <-completed[j]:
			case <-time.After(time.Minute):
				return out, fmt.Errorf("%s: job %d never completed", ls[j].name(), i)
			}
			if i > 0 {
				out[j] = append(out[j], time.Since(t0))
			}
		}
	}
	for j, stop := range stops {
		stops[j] = nil
		if _, err := stop(); err != nil {
			return out, fmt.Errorf("%s: %w", ls[j].name(), err)
		}
	}
	return out, nil
}

// idleLatencies submits k jobs one by one, each after the last completed
// and the queue has idled (idleFor), and times each from submit to its
// completion signal. One more job goes first, untimed: the first job of a
// run pays for cold caches and connections (0.3-0.7 ms more, seen on
// every system), which is not what an idle queue costs.
func idleLatencies(k int, submit func(i int) error, completed <-chan struct{}) ([]time.Duration, error) {
	var out []time.Duration
	for i := range k + 1 {
		time.Sleep(idleFor)
		t0 := time.Now()
		if err := submit(i); err != nil {
			return nil, err
		}
		select {
		case <-completed:
		case <-time.After(time.Minute):
			return nil, fmt.Errorf("job %d never completed", i)
		}
		if i > 0 {
			out = append(out, time.Since(t0))
		}
	}
	return out, nil
}

// idleFor is how long the queue idles before each latency job: long
// enough for every poller to back off to its longest interval (10 ms
// for each system here).
const idleFor = 50 * time.Millisecond

// nopService is never called: the bench's tasks have no effects.
type nopService struct{}

func (nopService) Kind() worker.ServiceKind { return worker.Dedup }
func (nopService) Call(context.Context, worker.Call) (string, error) {
	return "", errors.New("bench tasks make no calls")
}
func (nopService) Status(context.Context, string, int64) (bool, string, error) {
	return false, "", worker.ErrNoStatus
}

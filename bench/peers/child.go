package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/leasehold/leasehold/queue"
)

// The PostgreSQL cells run in child processes: each process of a cell is
// this binary again, started with -child and the JSON of its part. A
// child talks to the bench in JSON lines: it opens its pool and client,
// says it is ready, waits for "go" on its stdin, reports the jobs it
// completes (work) or has submitted (intake) as it goes, and on "stop"
// (or its stdin's end) stops and reports its counts.

// part is what one process of a cell does.
type part struct {
	System  string `json:"system"` // leaseholdPGName or riverPGName
	Kind    string `json:"kind"`   // work or intake
	Bulk    bool   `json:"bulk,omitempty"`
	URL     string `json:"url"`     // the run's schema and the cell's application_name
	Workers int    `json:"workers"` // work
	Jobs    int    `json:"jobs"`    // intake: the jobs this process submits
	First   int    `json:"first"`   // intake: its first job's number, so keys differ between processes
	Index   int    `json:"index"`   // the process's number in its cell
}

// childMsg is one line a child writes.
type childMsg struct {
	Ready bool      `json:"ready,omitempty"`
	Done  int64     `json:"done,omitempty"` // jobs done since the last message
	End   *childEnd `json:"end,omitempty"`
	Err   string    `json:"err,omitempty"`
}

// childEnd is a child's account of its run.
type childEnd struct {
	CPU         time.Duration `json:"cpu"` // the process's CPU from go to stop
	Retried     int64         `json:"retried,omitempty"`
	ClaimWrites int64         `json:"claim_writes,omitempty"`
	Claimed     int64         `json:"claimed,omitempty"`
	Groups      int64         `json:"groups,omitempty"`
	GroupOps    int64         `json:"group_ops,omitempty"`
	Fused       int64         `json:"fused,omitempty"`
	Sizes       []int64       `json:"sizes,omitempty"`
}

// childRun is one system's side of a part: started on go, stopped on stop.
type childRun interface {
	start(ctx context.Context, done func(int64), fail func(error)) error
	stop(ctx context.Context) (childEnd, error)
}

// childMain runs the part in spec, talking on stdin and stdout.
func childMain(spec string) error {
	var p part
	if err := json.Unmarshal([]byte(spec), &p); err != nil {
		return fmt.Errorf("-child: %w", err)
	}
	ctx := context.Background()
	out := &childOut{enc: json.NewEncoder(os.Stdout)}
	r, err := prepareChild(ctx, p)
	if err != nil {
		out.send(childMsg{Err: err.Error()})
		return err
	}
	in := bufio.NewScanner(os.Stdin)
	out.send(childMsg{Ready: true})
	if !in.Scan() || in.Text() != "go" {
		_, _ = r.stop(ctx)
		return errors.New("no go from the bench")
	}
	cpu0 := cpuTime()
	// Completions are counted here and sent by one goroutine, as many at
	// once as piled up while it wrote the last line.
	var pending atomic.Int64
	wake := make(chan struct{}, 1)
	sent := make(chan struct{})
	quit := make(chan struct{})
	go func() {
		defer close(sent)
		for {
			select {
			case <-wake:
			case <-quit:
				if n := pending.Swap(0); n > 0 {
					out.send(childMsg{Done: n})
				}
				return
			}
			if n := pending.Swap(0); n > 0 {
				out.send(childMsg{Done: n})
			}
		}
	}()
	done := func(n int64) {
		pending.Add(n)
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	fail := func(err error) { out.send(childMsg{Err: err.Error()}) }
	if err := r.start(ctx, done, fail); err != nil {
		out.send(childMsg{Err: err.Error()})
		return err
	}
	for in.Scan() && in.Text() != "stop" {
	}
	end, err := r.stop(ctx)
	end.CPU = cpuTime() - cpu0
	close(quit)
	<-sent
	if err != nil {
		out.send(childMsg{Err: err.Error()})
		return err
	}
	out.send(childMsg{End: &end})
	return nil
}

// childOut writes a child's lines, one at a time.
type childOut struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (o *childOut) send(m childMsg) {
	o.mu.Lock()
	defer o.mu.Unlock()
	_ = o.enc.Encode(m) // a bench that went away reads nothing more
}

func prepareChild(ctx context.Context, p part) (childRun, error) {
	switch p.System {
	case leaseholdPGName, leaseholdPGUnlimitedName:
		// The limit is the schema's, set (or not) by the seed.
		q, err := leasehold{label: p.System, pg: true}.open(ctx, p.URL, "", queue.MigrateNew)
		if err != nil {
			return nil, err
		}
		if err := warmQueue(ctx, q); err != nil {
			q.Close()
			return nil, err
		}
		return &leaseholdChild{p: p, q: q}, nil
	case riverPGName:
		r := riverPG{}
		pool, err := r.pool(ctx, p.URL)
		if err != nil {
			return nil, err
		}
		if err := warmPool(ctx, pool); err != nil {
			pool.Close()
			return nil, err
		}
		workers := 0
		if p.Kind == "work" {
			workers = p.Workers
		}
		c, err := r.client(pool, schemaOf(p.URL), workers)
		if err != nil {
			pool.Close()
			return nil, err
		}
		return &riverChild{p: p, pool: pool, c: c}, nil
	}
	return nil, fmt.Errorf("-child: no system %q", p.System)
}

// warmQueue opens the queue's pool to its size before the run, so that
// no run pays for its backends' start (a connection's catalog caches are
// filled by the run's first statements either way): waves of concurrent
// reads, each holding a connection while the others start.
func warmQueue(ctx context.Context, q *queue.Queue) error {
	for range 3 {
		var wg sync.WaitGroup
		errs := make(chan error, pgConns)
		for range pgConns {
			wg.Go(func() {
				if _, err := q.Metrics(ctx); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

// warmPool opens River's pool to its size before the run.
func warmPool(ctx context.Context, pool *pgxpool.Pool) error {
	var conns []*pgxpool.Conn
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range pgConns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	return nil
}

// leaseholdChild is a leasehold process: a worker runtime of p.Workers
// (work) or a caller submitting p.Jobs (intake).
type leaseholdChild struct {
	p        part
	q        *queue.Queue
	stopWork func() (runCounts, error)
	intake   chan error
}

func (l *leaseholdChild) start(ctx context.Context, done func(int64), fail func(error)) error {
	if l.p.Kind == "work" {
		stop, err := runner(l.q, fmt.Sprintf("bench-%d", l.p.Index), l.p.Workers, func() { done(1) })
		l.stopWork = stop
		return err
	}
	l.intake = make(chan error, 1)
	go func() {
		err := l.submit(ctx)
		if err != nil {
			fail(err)
		} else {
			done(int64(l.p.Jobs))
		}
		l.intake <- err
	}()
	return nil
}

func (l *leaseholdChild) submit(ctx context.Context) error {
	if l.p.Bulk {
		return submitMany(ctx, l.q, l.p.First, l.p.Jobs, 0)
	}
	for i := range l.p.Jobs {
		if _, err := l.q.Submit(ctx, leaseholdRequest(l.p.First+i, 0)); err != nil {
			return err
		}
	}
	return nil
}

func (l *leaseholdChild) stop(context.Context) (childEnd, error) {
	defer l.q.Close()
	var end childEnd
	var err error
	if l.stopWork != nil {
		var counts runCounts
		counts, err = l.stopWork()
		end.Retried, end.ClaimWrites, end.Claimed = counts.retried, counts.claimWrites, counts.claimed
	}
	if l.intake != nil {
		err = <-l.intake
	}
	end.Groups, end.GroupOps = l.q.GroupStats()
	end.Fused, _ = l.q.FusedStats()
	end.Sizes = l.q.GroupSizes()
	return end, err
}

// riverChild is a River process: a client of p.Workers workers (work) or
// a client inserting p.Jobs (intake).
type riverChild struct {
	p      part
	pool   *pgxpool.Pool
	c      *river.Client[pgx.Tx]
	cancel func()
	intake chan error
	events chan error
}

func (r *riverChild) start(ctx context.Context, done func(int64), fail func(error)) error {
	if r.p.Kind == "work" {
		events, cancel := r.c.SubscribeConfig(&river.SubscribeConfig{ChanSize: 1 << 16,
			Kinds: []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed}})
		r.cancel = cancel
		r.events = make(chan error, 1)
		go func() {
			var err error
			for e := range events {
				if e.Kind != river.EventKindJobCompleted && err == nil {
					err = fmt.Errorf("river: job %d: %s", e.Job.ID, e.Kind)
					fail(err)
				}
				done(1)
			}
			r.events <- err
		}()
		return r.c.Start(ctx)
	}
	r.intake = make(chan error, 1)
	go func() {
		_, err := riverIntake(ctx, r.c, r.p.Jobs, r.p.Bulk)
		if err != nil {
			fail(err)
		} else {
			done(int64(r.p.Jobs))
		}
		r.intake <- err
	}()
	return nil
}

func (r *riverChild) stop(ctx context.Context) (childEnd, error) {
	defer r.pool.Close()
	var err error
	if r.cancel != nil {
		err = stopRiver(ctx, r.c, nil)
		r.cancel()
		if eerr := <-r.events; err == nil {
			err = eerr
		}
	}
	if r.intake != nil {
		err = <-r.intake
	}
	return childEnd{}, err
}

// child is a running child process as the bench sees it.
type child struct {
	idx   int
	stdin io.WriteCloser
	wait  func() error
	kill  func()
}

// childSays is a child's message, with the child's number.
type childSays struct {
	idx int
	msg childMsg
	err error // the child's stdout ended (msg is empty)
}

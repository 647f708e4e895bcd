package queue

import (
	"context"
	"database/sql/driver"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"modernc.org/sqlite"

	"github.com/leasehold/leasehold/model"
)

// traceDriver opens SQLite connections that log, in order, every
// transaction begun on them ("begin") and every statement run, by its
// query's name in queries.sql (or its text).
type traceDriver struct {
	inner driver.Driver
	names map[string]string // query text -> name

	mu  sync.Mutex
	log []string
}

func newTraceDriver(t *testing.T) *traceDriver {
	t.Helper()
	texts, err := queries()
	require.NoError(t, err)
	names := map[string]string{}
	for name, text := range texts {
		names[text] = name
	}
	return &traceDriver{inner: &sqlite.Driver{}, names: names}
}

func (d *traceDriver) record(event, query string) {
	if name, ok := d.names[query]; ok {
		query = name
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if query != "" {
		event += " " + query
	}
	d.log = append(d.log, event)
}

// take returns the log so far and empties it.
func (d *traceDriver) take() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	log := d.log
	d.log = nil
	return log
}

func (d *traceDriver) Open(name string) (driver.Conn, error) {
	c, err := d.inner.Open(name)
	if err != nil {
		return nil, err
	}
	return &traceConn{Conn: c, d: d}, nil
}

type traceConn struct {
	driver.Conn
	d *traceDriver
}

func (c *traceConn) Unwrap() driver.Conn { return c.Conn }

func (c *traceConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	s, err := c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &traceStmt{Stmt: s, d: c.d, query: query}, nil
}

func (c *traceConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	c.d.record("begin", "")
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *traceConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.d.record("exec", query)
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (c *traceConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.d.record("query", query)
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
}

type traceStmt struct {
	driver.Stmt
	d     *traceDriver
	query string
}

func (s *traceStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.d.record("exec", s.query)
	return s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (s *traceStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.d.record("query", s.query)
	return s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
}

// withDriver opens the queue through d.
func withDriver(d driver.Driver) option { return func(o *Options) { o.Driver = d } }

// TestIdleClaimIsOneRead: a poll that finds nothing claimable runs one
// statement and no transaction, for a batch as for a single claim; the
// stored batch limit is read only inside the claim's transaction.
func TestIdleClaimIsOneRead(t *testing.T) {
	trace := newTraceDriver(t)
	b := setup(t, withDriver(trace))
	trace.take()
	for _, max := range []int{1, 4, model.ClaimBatchLimit} {
		require.Empty(t, b.claimN("w1", max))
		require.Equal(t, []string{"query claim_any"}, trace.take(), "batch of %d", max)
	}
	_, err := b.q.Claim(b.ctx, model.ClaimRequest{Worker: "w1", Max: model.ClaimBatchLimit + 1, Lease: testLease})
	requireField(t, err, "max")
	require.Empty(t, trace.take(), "a batch past the absolute bound is refused without I/O")

	b.submit()
	trace.take()
	require.Len(t, b.claimN("w1", 4), 1)
	log := trace.take()
	require.Equal(t, []string{"query claim_any", "begin", "query claim_any", "query settings_all", "query claim_next"}, log[:5],
		"whether anything is claimable is decided again inside the transaction (a group's earlier members may have "+
			"changed it), and the stored limit is read once, inside the transaction")
	require.NotContains(t, log[5:], "query settings_all")
}

// TestIdleClaimAboveStoredLimit: with nothing to claim, a batch within
// model.ClaimBatchLimit but above the stored ClaimBatchMax is answered
// empty (the idle poll does not read the limits); with a task to claim it
// is refused, and nothing is written.
func TestIdleClaimAboveStoredLimit(t *testing.T) {
	b := setup(t)
	b.setLimits(func(l *model.Limits) { l.ClaimBatchMax = 2 })
	require.Empty(t, b.claimN("w1", 3))
	b.submit()
	dump := b.dump()
	_, err := b.q.Claim(b.ctx, model.ClaimRequest{Worker: "w1", Max: 3, Lease: testLease})
	requireField(t, err, "max")
	require.Equal(t, dump, b.dump())
	require.Len(t, b.claimN("w1", 2), 1)
}

// TestIdleEnqueueDueTakesNoLock: a scheduler pass with no run due reads
// the schedules once and begins no transaction; a due run is enqueued once.
func TestIdleEnqueueDueTakesNoLock(t *testing.T) {
	trace := newTraceDriver(t)
	b := setup(t, withDriver(trace))
	spec := model.ScheduleSpec{User: "ana", Payload: `{}`, CostBudget: 5, StepsMax: 3,
		Origin: b.now().Add(time.Minute), Period: time.Hour}
	_, err := b.q.AddSchedule(b.ctx, spec, "ops")
	require.NoError(t, err)
	trace.take()

	idle := func(why string) {
		t.Helper()
		res, err := b.q.EnqueueDue(b.ctx)
		require.NoError(t, err)
		require.Equal(t, model.EnqueueResult{}, res, why)
		require.Equal(t, []string{"query schedules_all"}, trace.take(), why)
	}
	idle("no schedule yet due")
	b.clock.Advance(time.Minute)
	res, err := b.q.EnqueueDue(b.ctx)
	require.NoError(t, err)
	require.Equal(t, model.EnqueueResult{Enqueued: 1}, res)
	require.Contains(t, trace.take(), "begin")
	idle("run 0 already enqueued")
	b.clock.Advance(time.Hour - time.Millisecond)
	idle("run 1 not due yet")
	b.clock.Advance(3 * time.Hour)
	res, err = b.q.EnqueueDue(b.ctx)
	require.NoError(t, err)
	require.Equal(t, model.EnqueueResult{Enqueued: 1, Collapsed: 2}, res, "runs 1 and 2 collapsed into run 3")
	require.Contains(t, trace.take(), "begin")
	idle("run 3 already enqueued")
	tasks, err := b.q.List(b.ctx, model.ListFilter{})
	require.NoError(t, err)
	require.Len(t, tasks, 2)
}

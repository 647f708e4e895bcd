package queue

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// testLease is the lease the test helpers claim under.
const testLease = 30 * time.Second

// bundle is what setup returns: one queue on a fake clock that starts at
// epoch (declared in rapid_test.go), and helpers that fail the test on any
// unexpected error.
type bundle struct {
	t      *testing.T
	ctx    context.Context
	clock  *clockwork.FakeClock
	q      *Queue
	path   string // Memory, or the database file
	keys   int    // idempotency keys handed out by submit
	closed bool
}

// option changes the Options a bundle's queue is opened with.
type option func(*Options)

// withRand draws backoff jitter from r.
func withRand(r model.Rand) option { return func(o *Options) { o.Rand = r } }

// withBackoff uses policy b.
func withBackoff(b model.Backoff) option { return func(o *Options) { o.Backoff = b } }

// setup opens an in-memory queue on a fake clock at epoch. When the test
// ends it checks the trigger-kept counters against a recount and closes
// the queue.
func setup(t *testing.T, opts ...option) *bundle {
	t.Helper()
	return openBundle(t, Memory, clockwork.NewFakeClockAt(epoch), 1, opts...)
}

// setupFile is setup on a database file in t.TempDir().
func setupFile(t *testing.T, opts ...option) *bundle {
	t.Helper()
	path := filepath.Join(t.TempDir(), "leasehold.db")
	return openBundle(t, path, clockwork.NewFakeClockAt(epoch), 1, opts...)
}

// reopen opens another queue on the same database file and clock: a second
// process, or the same one after a restart. seed must differ from every
// other open queue's, so their task IDs differ.
func (b *bundle) reopen(seed uint64, opts ...option) *bundle {
	b.t.Helper()
	require.NotEqual(b.t, Memory, b.path, "an in-memory database cannot be opened twice")
	return openBundle(b.t, b.path, b.clock, seed, opts...)
}

func openBundle(t *testing.T, path string, clock *clockwork.FakeClock, seed uint64, opts ...option) *bundle {
	t.Helper()
	ctx := context.Background()
	o := Options{Path: path, Clock: clock, IDs: model.NewSeededIDs(seed), Rand: rand.New(rand.NewPCG(seed, 7))}
	for _, opt := range opts {
		opt(&o)
	}
	q, err := Open(ctx, o)
	require.NoError(t, err)
	b := &bundle{t: t, ctx: ctx, clock: clock, q: q, path: path}
	t.Cleanup(func() {
		if b.closed {
			return
		}
		require.NoError(t, q.CheckCounters(ctx))
		require.NoError(t, q.Close())
	})
	return b
}

// close checks the counters and closes the queue before the test ends.
func (b *bundle) close() {
	b.t.Helper()
	require.NoError(b.t, b.q.CheckCounters(b.ctx))
	require.NoError(b.t, b.q.Close())
	b.closed = true
}

// request returns a valid request of user ana under a fresh key.
func (b *bundle) request() model.SubmitRequest {
	b.keys++
	return model.SubmitRequest{
		User:       "ana",
		Key:        fmt.Sprintf("k%d", b.keys),
		Payload:    `{"steps":[{"cost":1}]}`,
		CostBudget: 10,
		StepsMax:   5,
	}
}

// submit submits request() changed by mods and returns the new task's ID.
func (b *bundle) submit(mods ...func(*model.SubmitRequest)) string {
	b.t.Helper()
	r := b.request()
	for _, mod := range mods {
		mod(&r)
	}
	res, err := b.q.Submit(b.ctx, r)
	require.NoError(b.t, err)
	require.False(b.t, res.Replay)
	require.NotEmpty(b.t, res.TaskID)
	return res.TaskID
}

// claimN claims up to count tasks for worker under testLease.
func (b *bundle) claimN(worker string, count int) []model.Claimed {
	b.t.Helper()
	return b.claimFor(worker, count, testLease)
}

// claimFor claims up to count tasks for worker under lease.
func (b *bundle) claimFor(worker string, count int, lease time.Duration) []model.Claimed {
	b.t.Helper()
	cs, err := b.q.Claim(b.ctx, model.ClaimRequest{Worker: worker, Max: count, Lease: lease})
	require.NoError(b.t, err)
	return cs
}

// claim claims exactly one task for worker under testLease.
func (b *bundle) claim(worker string) model.Claimed {
	b.t.Helper()
	cs := b.claimN(worker, 1)
	require.Len(b.t, cs, 1, "expected a claimable task")
	return cs[0]
}

// noClaim requires that nothing is claimable.
func (b *bundle) noClaim() {
	b.t.Helper()
	require.Empty(b.t, b.claimN("idle", 1), "expected nothing claimable")
}

// running submits a task (changed by mods) and claims it for w1.
func (b *bundle) running(mods ...func(*model.SubmitRequest)) (string, model.Claim) {
	b.t.Helper()
	id := b.submit(mods...)
	c := b.claim("w1")
	require.Equal(b.t, id, c.Claim.TaskID)
	return id, c.Claim
}

// waiting submits a task, claims it, runs one step and pauses it at the
// gate "manager" (step 1).
func (b *bundle) waiting(mods ...func(*model.SubmitRequest)) (string, model.Claim) {
	b.t.Helper()
	id, c := b.running(mods...)
	_, err := b.q.CompleteStep(b.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 2, Checkpoint: `{"at":1}`})
	require.NoError(b.t, err)
	to, err := b.q.Pause(b.ctx, c, 1, "manager")
	require.NoError(b.t, err)
	require.Equal(b.t, model.WaitingForApproval, to)
	return id, c
}

// parked submits a task, claims it and fails it as uncertain, leaving it in
// needs_review with an intent for step 0 and no receipt.
func (b *bundle) parked(mods ...func(*model.SubmitRequest)) (string, model.Claim) {
	b.t.Helper()
	id, c := b.running(mods...)
	intent, err := b.q.RecordIntent(b.ctx, c, 0)
	require.NoError(b.t, err)
	to, err := b.q.Fail(b.ctx, c, model.Failure{Class: model.Uncertain, OpID: intent.OpID, Message: "no answer"})
	require.NoError(b.t, err)
	require.Equal(b.t, model.NeedsReview, to)
	return id, c
}

func (b *bundle) task(id string) model.Task {
	b.t.Helper()
	task, err := b.q.Task(b.ctx, id)
	require.NoError(b.t, err)
	return task
}

func (b *bundle) state(id string) model.State { return b.task(id).State }

// events returns one task's events, or every event for "".
func (b *bundle) events(id string) []model.Event {
	b.t.Helper()
	evs, err := b.q.Events(b.ctx, id)
	require.NoError(b.t, err)
	return evs
}

func (b *bundle) lastEvent(id string) model.Event {
	b.t.Helper()
	evs := b.events(id)
	require.NotEmpty(b.t, evs)
	return evs[len(evs)-1]
}

func (b *bundle) effects(id string) []model.Effect {
	b.t.Helper()
	es, err := b.q.Effects(b.ctx, id)
	require.NoError(b.t, err)
	return es
}

func (b *bundle) metrics() model.Metrics {
	b.t.Helper()
	m, err := b.q.Metrics(b.ctx)
	require.NoError(b.t, err)
	return m
}

func (b *bundle) advance(d time.Duration) { b.clock.Advance(d) }

// now is the queue's idea of now: the fake clock at millisecond precision.
func (b *bundle) now() time.Time { return model.Truncate(b.clock.Now()) }

// setLimits changes the stored limits, starting from the current ones.
func (b *bundle) setLimits(change func(*model.Limits)) {
	b.t.Helper()
	l, _, err := b.q.Limits(b.ctx)
	require.NoError(b.t, err)
	change(&l)
	require.NoError(b.t, b.q.SetLimits(b.ctx, l, "ops"))
}

func (b *bundle) reap() model.ReapResult {
	b.t.Helper()
	res, err := b.q.Reap(b.ctx)
	require.NoError(b.t, err)
	return res
}

// dump renders every row of every table, so a test can show that an
// operation wrote nothing at all.
func (b *bundle) dump() string {
	b.t.Helper()
	return dumpDB(b.t, b.ctx, b.q.db)
}

func dumpDB(t *testing.T, ctx context.Context, db *sql.DB) string {
	t.Helper()
	rows, err := db.QueryContext(ctx, "SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
	require.NoError(t, err)
	var tables []string
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		tables = append(tables, name)
	}
	require.NoError(t, rows.Err())
	require.NoError(t, rows.Close())
	var out strings.Builder
	for _, table := range tables {
		rows, err := db.QueryContext(ctx, "SELECT * FROM "+table)
		require.NoError(t, err)
		cols, err := rows.Columns()
		require.NoError(t, err)
		var lines []string
		for rows.Next() {
			values := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range values {
				ptrs[i] = &values[i]
			}
			require.NoError(t, rows.Scan(ptrs...))
			lines = append(lines, fmt.Sprintf("%v", values))
		}
		require.NoError(t, rows.Err())
		require.NoError(t, rows.Close())
		sort.Strings(lines)
		fmt.Fprintf(&out, "%s %v\n%s\n", table, cols, strings.Join(lines, "\n"))
	}
	return out.String()
}

// fixedRand always draws the same value, to pin backoff jitter.
type fixedRand uint64

func (r fixedRand) Uint64() uint64 { return uint64(r) }

func TestSetupBundle(t *testing.T) {
	for _, b := range []*bundle{setup(t), setupFile(t)} {
		id, c := b.running()
		require.Equal(t, int64(1), c.Fence)
		require.Equal(t, model.Running, b.state(id))
		require.Equal(t, epoch, b.now())
		require.Equal(t, b.path, b.q.Path())
	}
}

// livePragmas reads the PRAGMAs of count connections of b's pool at once
// (so each is a different connection), as "name=value" lines.
func livePragmas(t *testing.T, b *bundle, count int) [][]string {
	t.Helper()
	var out [][]string
	for range count {
		conn, err := b.q.db.Conn(b.ctx)
		require.NoError(t, err)
		defer conn.Close()
		var lines []string
		for _, name := range []string{"busy_timeout", "journal_mode", "journal_size_limit", "synchronous", "foreign_keys", "temp_store"} {
			var value string
			require.NoError(t, conn.QueryRowContext(b.ctx, "PRAGMA "+name).Scan(&value))
			lines = append(lines, name+"="+value)
		}
		out = append(out, lines)
	}
	return out
}

func TestFilePragmas(t *testing.T) {
	b := setupFile(t)
	require.Equal(t, []string{"busy_timeout(5000)", "journal_mode(WAL)", "journal_size_limit(4194304)", "synchronous(FULL)", "foreign_keys(1)", "temp_store(MEMORY)"}, b.q.Pragmas())
	// Every pooled connection has them (synchronous FULL is 2).
	for _, conn := range livePragmas(t, b, 4) {
		require.Equal(t, []string{"busy_timeout=5000", "journal_mode=wal", "journal_size_limit=4194304", "synchronous=2", "foreign_keys=1", "temp_store=2"}, conn)
	}

	normal := setupFile(t, func(o *Options) { o.Synchronous = SynchronousNormal })
	require.Equal(t, []string{"busy_timeout(5000)", "journal_mode(WAL)", "journal_size_limit(4194304)", "synchronous(NORMAL)", "foreign_keys(1)", "temp_store(MEMORY)"}, normal.q.Pragmas())
	require.Equal(t, [][]string{{"busy_timeout=5000", "journal_mode=wal", "journal_size_limit=4194304", "synchronous=1", "foreign_keys=1", "temp_store=2"}}, livePragmas(t, normal, 1))

	m := setup(t)
	require.Equal(t, []string{"busy_timeout(5000)", "synchronous(FULL)", "foreign_keys(1)", "temp_store(MEMORY)"}, m.q.Pragmas())
	require.Equal(t, [][]string{{"busy_timeout=5000", "journal_mode=memory", "journal_size_limit=-1", "synchronous=2", "foreign_keys=1", "temp_store=2"}}, livePragmas(t, m, 1))
}

// requireField requires a validation error naming field.
func requireField(t *testing.T, err error, field string) {
	t.Helper()
	require.ErrorIs(t, err, ErrInvalidInput)
	var ve *model.ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, field, ve.Field, "error: %v", err)
}

package workertest_test

// The double behaves as its kind, the same in memory and over a SQLite
// file: the kinds' rules are one implementation, and these tests hold both
// stores to it.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/worker"
	"github.com/leasehold/leasehold/worker/workertest"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// double is either store, with its applications and call records read the
// same way.
type double struct {
	worker.Service
	applications func() map[string]int
	records      func() []workertest.CallRecord
}

// doubles opens a double of kind in each store.
func doubles(t *testing.T, kind worker.ServiceKind, clock clockwork.Clock) map[string]double {
	t.Helper()
	mem := workertest.NewService(kind, clock)
	ledger, err := workertest.OpenLedger(filepath.Join(t.TempDir(), "service.db"), kind, clock)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ledger.Close()) })
	return map[string]double{
		"memory": {Service: mem,
			applications: func() map[string]int {
				out := map[string]int{}
				for _, op := range mem.AppliedOps() {
					out[op] = mem.Applications(op)
				}
				return out
			},
			records: mem.Records},
		"ledger": {Service: ledger,
			applications: func() map[string]int {
				out, err := ledger.Applications()
				require.NoError(t, err)
				return out
			},
			records: func() []workertest.CallRecord {
				out, err := ledger.Records()
				require.NoError(t, err)
				return out
			}},
	}
}

// The same script of calls and status queries, under fences 1, then 2 (a
// newer claim asks, then calls), then 1 again (the older claim's late
// call), gives each kind its own answers, in both stores.
func TestKindsInBothStores(t *testing.T) {
	cases := []struct {
		kind     worker.ServiceKind
		results  []string // each call's result, or its error
		statuses []string // the status query's answer
		applied  int
		outcomes []workertest.Outcome
	}{
		{worker.Dedup, []string{"charge#1", "charge#1", "charge#1"}, []string{"error: " + worker.ErrNoStatus.Error()}, 1,
			[]workertest.Outcome{workertest.Applied, workertest.Deduplicated, workertest.Deduplicated}},
		{worker.Fenced, []string{"charge#1", "charge#2", "error: " + worker.ErrStaleFence.Error()}, []string{"applied=true charge#1"}, 2,
			[]workertest.Outcome{workertest.Applied, workertest.Applied, workertest.RefusedStaleFence}},
		{worker.Queryable, []string{"charge#1", "charge#2", "charge#3"}, []string{"applied=true charge#1"}, 3,
			[]workertest.Outcome{workertest.Applied, workertest.Applied, workertest.Applied}},
		{worker.Plain, []string{"charge#1", "charge#2", "charge#3"}, []string{"error: " + worker.ErrNoStatus.Error()}, 3,
			[]workertest.Outcome{workertest.Applied, workertest.Applied, workertest.Applied}},
	}
	ctx := context.Background()
	for _, tc := range cases {
		for store, d := range doubles(t, tc.kind, clockwork.NewFakeClockAt(epoch)) {
			t.Run(string(tc.kind)+"/"+store, func(t *testing.T) {
				require.Equal(t, tc.kind, d.Kind())
				var results, statuses []string
				results = append(results, answer(d.Call(ctx, worker.Call{OpID: "t_1.s1", TaskID: "t_1", Effect: "charge", Fence: 1})))
				applied, result, err := d.Status(ctx, "t_1.s1", 2)
				if err == nil {
					result = fmt.Sprintf("applied=%v %s", applied, result)
				}
				statuses = append(statuses, answer(result, err))
				results = append(results, answer(d.Call(ctx, worker.Call{OpID: "t_1.s1", TaskID: "t_1", Effect: "charge", Fence: 2})))
				results = append(results, answer(d.Call(ctx, worker.Call{OpID: "t_1.s1", TaskID: "t_1", Effect: "charge", Fence: 1})))
				require.Equal(t, tc.results, results)
				require.Equal(t, tc.statuses, statuses)
				require.Equal(t, map[string]int{"t_1.s1": tc.applied}, d.applications())
				var outcomes []workertest.Outcome
				for _, r := range d.records() {
					require.Equal(t, "t_1.s1", r.OpID)
					require.Equal(t, epoch, r.At)
					outcomes = append(outcomes, r.Outcome)
				}
				require.Equal(t, tc.outcomes, outcomes)
			})
		}
	}
}

// answer renders a call's or a query's answer: its result, or the
// sentinel its error wraps.
func answer(result string, err error) string {
	for _, sentinel := range []error{worker.ErrStaleFence, worker.ErrNoStatus} {
		if errors.Is(err, sentinel) {
			return "error: " + sentinel.Error()
		}
	}
	if err != nil {
		return "error: " + err.Error()
	}
	return result
}

// A status query about an operation never called says not applied; a
// Fenced double's query registers the asker's fence, so an older claim's
// call is refused afterwards, and a query under a lower fence lowers
// nothing.
func TestFencedStatusRegistersTheFence(t *testing.T) {
	ctx := context.Background()
	for store, d := range doubles(t, worker.Fenced, clockwork.NewFakeClockAt(epoch)) {
		t.Run(store, func(t *testing.T) {
			applied, _, err := d.Status(ctx, "t_1.s1", 3)
			require.NoError(t, err)
			require.False(t, applied)
			_, _, err = d.Status(ctx, "t_1.s1", 1)
			require.NoError(t, err)
			_, err = d.Call(ctx, worker.Call{OpID: "t_1.s1", Effect: "charge", Fence: 2})
			require.ErrorIs(t, err, worker.ErrStaleFence)
			result, err := d.Call(ctx, worker.Call{OpID: "t_1.s1", Effect: "charge", Fence: 3})
			require.NoError(t, err)
			require.Equal(t, "charge#1", result)
			require.Equal(t, map[string]int{"t_1.s1": 1}, d.applications())
		})
	}
}

// The memory double records every call and query in order, and the
// operations in the order they were first applied.
func TestServiceRecordsCallsAndQueries(t *testing.T) {
	ctx := context.Background()
	s := workertest.NewService(worker.Queryable, clockwork.NewFakeClockAt(epoch))
	for _, op := range []string{"t_2.s0", "t_1.s0", "t_2.s0"} {
		_, err := s.Call(ctx, worker.Call{OpID: op, Effect: "post", Fence: 1})
		require.NoError(t, err)
	}
	_, _, err := s.Status(ctx, "t_1.s0", 4)
	require.NoError(t, err)
	require.Equal(t, []string{"call t_2.s0 1", "call t_1.s0 1", "call t_2.s0 1", "status t_1.s0 4"}, s.Log())
	require.Equal(t, []string{"t_2.s0", "t_1.s0"}, s.AppliedOps())
	require.Equal(t, 2, s.Applications("t_2.s0"))
	require.True(t, s.Applied("t_1.s0"))
	require.False(t, s.Applied("t_3.s0"))
	require.Equal(t, 3, s.CallCount())
	require.Len(t, s.Calls(), 3)
	require.Equal(t, 1, s.Statuses())
	since, total := s.ApplicationsSince(1)
	require.Equal(t, []string{"t_1.s0", "t_2.s0"}, since)
	require.Equal(t, 3, total)
}

// Two opens of one ledger file (two worker processes) share its entries:
// a Dedup ledger applies an operation once across them.
func TestLedgerIsSharedThroughItsFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "service.db")
	clock := clockwork.NewFakeClockAt(epoch)
	a, err := workertest.OpenLedger(path, worker.Dedup, clock)
	require.NoError(t, err)
	defer a.Close()
	b, err := workertest.OpenLedger(path, worker.Dedup, clock)
	require.NoError(t, err)
	defer b.Close()
	first, err := a.Call(ctx, worker.Call{OpID: "t_1.s1", Effect: "charge", Fence: 1})
	require.NoError(t, err)
	again, err := b.Call(ctx, worker.Call{OpID: "t_1.s1", Effect: "charge", Fence: 2})
	require.NoError(t, err)
	require.Equal(t, first, again)
	applied, err := a.Applications()
	require.NoError(t, err)
	require.Equal(t, map[string]int{"t_1.s1": 1}, applied)
	_, err = workertest.OpenLedger(path, worker.Dedup, nil)
	require.ErrorContains(t, err, "clock")
}

// While Hold holds, no other connection can take the ledger's write lock,
// and a queryable ledger's status queries keep answering; after release
// the lock is free.
func TestHoldTakesTheWriteLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "service.db")
	s, err := workertest.OpenLedger(path, worker.Queryable, clockwork.NewFakeClockAt(epoch))
	require.NoError(t, err)
	defer s.Close()
	other, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(0)")
	require.NoError(t, err)
	defer other.Close()
	other.SetMaxOpenConns(1)
	tryLock := func() error {
		_, err := other.Exec("BEGIN IMMEDIATE")
		if err == nil {
			_, err = other.Exec("ROLLBACK")
		}
		return err
	}
	require.NoError(t, tryLock())
	release, err := s.Hold(context.Background())
	require.NoError(t, err)
	require.ErrorContains(t, tryLock(), "locked")
	applied, _, err := s.Status(context.Background(), "t_1.s1", 1)
	require.NoError(t, err)
	require.False(t, applied)
	require.NoError(t, release())
	require.NoError(t, release(), "a second release does nothing")
	require.NoError(t, tryLock())
}

// Worker processes started together open one new ledger file at once:
// each open survives the others' race to switch the file to WAL, and every
// call is recorded once. (With a single attempt at the switch, about one
// round in twenty-five fails with SQLITE_BUSY.)
func TestLedgerOpensSurviveARaceOnANewFile(t *testing.T) {
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(epoch)
	for round := range 40 {
		path := filepath.Join(t.TempDir(), fmt.Sprintf("race%d.db", round))
		const opens = 6
		errs := make([]error, opens)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range opens {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				l, err := workertest.OpenLedger(path, worker.Dedup, clock)
				if err != nil {
					errs[i] = err
					return
				}
				defer l.Close()
				_, errs[i] = l.Call(ctx, worker.Call{OpID: fmt.Sprintf("t_%d.s1", i), Effect: "charge", Fence: 1})
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "round %d open %d", round, i)
		}
		l, err := workertest.OpenLedger(path, worker.Dedup, clock)
		require.NoError(t, err)
		applied, err := l.Applications()
		require.NoError(t, err)
		require.Len(t, applied, opens)
		require.NoError(t, l.Close())
		db, err := sql.Open("sqlite", path)
		require.NoError(t, err)
		var mode string
		require.NoError(t, db.QueryRow("PRAGMA journal_mode").Scan(&mode))
		require.NoError(t, db.Close())
		require.Equal(t, "wal", mode)
	}
}

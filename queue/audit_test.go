package queue

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// TestAuditMatchesFilteredTrail checks every form of the audit query
// against the trail filtered in Go: the same events in seq order, for
// each combination of task, actor and time window, with a limit, and with
// a clock that stepped back (so time order is not seq order).
func TestAuditMatchesFilteredTrail(t *testing.T) {
	b := setup(t)
	var ids []string
	for i := range 6 {
		id := b.submit()
		ids = append(ids, id)
		b.clock.Advance(time.Minute)
		_, err := b.q.Cancel(b.ctx, id, fmt.Sprintf("caller%d", i%2))
		require.NoError(t, err)
		b.clock.Advance(time.Minute)
		if i == 3 {
			b.clock.Advance(-30 * time.Minute) // another process's clock, behind
		}
	}
	require.NoError(t, b.q.RecordOperatorEvent(b.ctx, model.EventMigrated, "caller1", "test"))
	all := b.events("")
	require.Len(t, all, 13)

	at := func(m int) time.Time { return epoch.Add(time.Duration(m) * time.Minute) }
	var filters []AuditFilter
	for _, task := range []string{"", ids[0], ids[4], "t_unknown"} {
		for _, actor := range []string{"", "caller1", "ana", "nobody"} {
			for _, window := range [][2]time.Time{{}, {at(1), time.Time{}}, {time.Time{}, at(3)}, {at(-10), at(5)}, {at(2), at(2)}} {
				for _, limit := range []int{0, 2} {
					filters = append(filters, AuditFilter{TaskID: task, Actor: actor, Since: window[0], Until: window[1], Limit: limit})
				}
			}
		}
	}
	for _, f := range filters {
		var want []model.Event
		for _, e := range all {
			if (f.TaskID == "" || e.TaskID == f.TaskID) && (f.Actor == "" || e.Actor == f.Actor) &&
				!e.At.Before(f.Since) && (f.Until.IsZero() || e.At.Before(f.Until)) {
				want = append(want, e)
			}
		}
		if f.Limit > 0 && len(want) > f.Limit {
			want = want[:f.Limit]
		}
		got, err := b.q.Audit(b.ctx, f)
		require.NoError(t, err)
		require.Equal(t, want, got, "%+v (%s)", f, auditQuery(f))
	}
	stepped, err := b.q.Audit(b.ctx, AuditFilter{Since: at(-30), Until: at(30)})
	require.NoError(t, err)
	require.Equal(t, all, stepped, "the window's events in seq order, not time order")
	require.True(t, stepped[8].At.Before(stepped[7].At), "the clock stepped back between them")
}

// TestClosedQueueRefusesWithErrClosed: every operation after Close fails
// with ErrClosed, reads and writes alike.
func TestClosedQueueRefusesWithErrClosed(t *testing.T) {
	b := setup(t)
	id, c := b.running()
	_, err := b.q.Task(b.ctx, id) // prepares task_by_id, so the cached statement is closed too
	require.NoError(t, err)
	b.close()
	for name, op := range map[string]func() error{
		"task":    func() error { _, err := b.q.Task(b.ctx, id); return err },
		"list":    func() error { _, err := b.q.List(b.ctx, model.ListFilter{}); return err },
		"audit":   func() error { _, err := b.q.Audit(b.ctx, AuditFilter{}); return err },
		"metrics": func() error { _, err := b.q.Metrics(b.ctx); return err },
		"image":   func() error { _, err := b.q.Image(b.ctx); return err },
		"submit":  func() error { _, err := b.q.Submit(b.ctx, b.request()); return err },
		"claim": func() error {
			_, err := b.q.Claim(b.ctx, model.ClaimRequest{Worker: "w1", Max: 1, Lease: testLease})
			return err
		},
		"complete": func() error { return b.q.Complete(b.ctx, c) },
		"reap":     func() error { _, err := b.q.Reap(b.ctx); return err },
		"health":   func() error { return b.q.Health(b.ctx) },
		"counters": func() error { return b.q.CheckCounters(b.ctx) },
	} {
		require.ErrorIs(t, op(), ErrClosed, name)
	}
}

package queue

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/redact"
	"github.com/leasehold/leasehold/queue/internal/postgres"
	"github.com/leasehold/leasehold/queue/internal/seam"
)

// ReadyChannel is the PostgreSQL notification channel a transaction that
// made a task claimable notifies, with its schema as the payload
// (postgres.ReadyChannel).
const ReadyChannel = postgres.ReadyChannel

// Wake-ups on PostgreSQL. A write that makes a task claimable now (a
// submit, a periodic run enqueued, a release, a requeue or an approval;
// not a retry whose backoff has yet to pass) marks its transaction ready
// (txn.madeReady), and the group that carries it sends one notification,
// ready_notify, in the same transaction, just before COMMIT: PostgreSQL
// delivers it to every listener once the transaction commits, and never
// if it rolls back. It is sent by the protocol, not by a trigger, so a
// transaction that queues a thousand tasks sends one, and a migration or
// an operator's SQL sends none. Its payload is the schema, so queues in
// different schemas of one database do not wake each other's workers.
//
// A worker listens on a connection of its own (Wake), outside the pool:
// LISTEN belongs to a session, and a pooled connection is handed to
// whoever asks next. Notifications are hints, not messages: one lost
// while the listener was away costs the idle workers their poll interval,
// and every (re)connection wakes them once, for what may have committed
// meanwhile.

// The wake listener's reconnection backoff, on the queue's clock: it
// doubles from WakeRetryMin up to WakeRetryMax while the server cannot be
// reached.
const (
	WakeRetryMin = time.Second
	WakeRetryMax = 30 * time.Second
)

// madeReady marks the transaction as having made a task claimable, if it
// is due by now.
func (t *txn) madeReady(runAt time.Time) {
	if !runAt.After(t.now) {
		t.ready = true
	}
}

// notifyReady sends the group's one notification if a member whose writes
// the commit keeps made a task claimable and the store notifies.
func (g *group) notifyReady() error {
	n := g.q.store.Capabilities().Notify
	if n == nil {
		return nil
	}
	for i, t := range g.txns {
		if t.ready && !g.alone[i] {
			return n.NotifyReady(t)
		}
	}
	return nil
}

// abort rolls the group back after a statement of its own (not of a
// member) failed with err, and answers every member: one already refused
// and rolled back to its savepoint keeps its refusal, the others are told
// ErrNotApplied.
func (g *group) abort(err error) {
	rerr := g.tx.Rollback()
	for i, m := range g.members {
		if g.alone[i] {
			m.finish(g.results[i])
			continue
		}
		out := fmt.Errorf("queue: %s: %w", m.op, err)
		if rerr != nil {
			out = fmt.Errorf("queue: %s: %w (rollback: %v)", m.op, err, rerr)
		}
		m.finish(notApplied(out))
	}
}

// Wake returns a channel that receives when a task may have become
// claimable: on PostgreSQL, when any process on any machine commits a
// write that made one claimable now in this queue's schema, and once each
// time the listening connection is opened (a notification sent while it
// was away is lost). Signals coalesce: the channel holds at most one. The
// listener lives until ctx ends.
//
// The first connection is logged; a lost one is logged once, as a
// warning, and reopened with a backoff on the queue's clock (WakeRetryMin
// to WakeRetryMax); its return is logged too. Meanwhile nothing wakes the channel, and a worker that
// also polls loses nothing but time.
//
// On SQLite the channel receives when a write of this process commits
// that made a task claimable now (localwake.go); a worker in another
// process over the same file is not woken and polls. On a closed queue
// Wake returns nil, which never receives. Close stops the listeners.
func (q *Queue) Wake(ctx context.Context, log *slog.Logger) <-chan struct{} {
	n := q.store.Capabilities().Notify
	if n == nil {
		return q.wakeLocal(ctx)
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, done, ok := q.wakes.add(ctx)
	if !ok {
		return nil // closed
	}
	ch := make(chan struct{}, 1)
	go func() {
		defer done()
		q.listen(ctx, n, ch, log)
		log.Debug("wake listener stopped", "db", q.path)
	}()
	return ch
}

// listeners are the contexts of a queue's wake listeners: Close ends
// them, so no listener outlives its queue.
type listeners struct {
	mu     sync.Mutex
	closed bool
	next   int
	stops  map[int]context.CancelFunc
}

// add returns a context for a new listener that ends with ctx or at stop,
// and the function the listener calls when it has ended; false once stop
// has been called.
func (l *listeners) add(ctx context.Context) (context.Context, func(), bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, nil, false
	}
	ctx, cancel := context.WithCancel(ctx)
	if l.stops == nil {
		l.stops = map[int]context.CancelFunc{}
	}
	id := l.next
	l.next++
	l.stops[id] = cancel
	return ctx, func() {
		l.mu.Lock()
		delete(l.stops, id)
		l.mu.Unlock()
		cancel()
	}, true
}

// stop ends every listener, and refuses new ones.
func (l *listeners) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for _, cancel := range l.stops {
		cancel()
	}
}

// signal puts a wake-up in ch unless one is waiting already.
func signal(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// listen keeps a listening connection open until ctx ends, waking ch for
// each notification of this schema.
func (q *Queue) listen(ctx context.Context, n seam.Notifier, ch chan<- struct{}, log *slog.Logger) {
	var retry time.Duration
	lost, up := false, false
	for ctx.Err() == nil {
		l, err := n.Listen(ctx, runner{q}, q.params)
		if err == nil {
			switch {
			case lost:
				log.Info("wake listener back", "db", q.path)
				lost = false
			case !up:
				log.Info("wake listener up", "db", q.path, "channel", ReadyChannel)
			}
			up = true
			retry = 0
			signal(ch)
			for err == nil {
				if err = l.Wait(ctx); err == nil {
					signal(ch)
				}
			}
			l.Close(context.WithoutCancel(ctx))
		}
		if ctx.Err() != nil {
			return
		}
		retry = min(max(2*retry, WakeRetryMin), WakeRetryMax)
		timer := q.clock.NewTimer(retry)
		if !lost {
			log.Warn("wake listener lost; idle workers poll until it is back", "db", q.path,
				"error", redact.Message(err, redact.Passwords(err.Error(), q.params.Path)).Error(), "retry_in", retry.String())
			lost = true
		}
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.Chan():
		}
	}
}

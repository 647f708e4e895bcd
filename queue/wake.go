package queue

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/redact"
	"github.com/leasehold/leasehold/queue/internal/postgres"
	"github.com/leasehold/leasehold/queue/internal/seam"
)

// ReadyChannel is the PostgreSQL notification channel notified after a
// commit that made a task claimable, with its schema as the payload
// (postgres.ReadyChannel).
const ReadyChannel = postgres.ReadyChannel

// Wake-ups on PostgreSQL. A write that makes a task claimable now (a
// submit, a periodic run enqueued, a release, a requeue or an approval;
// not a retry whose backoff has yet to pass) marks its transaction ready
// (txn.madeReady). After such a commit returned, the queue signals its
// notifier (readyNotifier), which sends ready_notify as a transaction of
// its own, on a connection of the pool. The write's transaction does not
// notify: PostgreSQL serialises every notifying transaction's commit,
// flush included, on one cluster-wide lock, so writes that notified
// committed one at a time across every process. The notifier's own
// transaction commits without waiting for the flush. Signals coalesce:
// the commits made while a notification is being sent, or within
// WakeNotifyEvery of the last one, leave one more to send, however many
// they are. A listener a notification wakes finds
// every task committed before it, since it is sent after those commits.
// It is sent by the protocol, not by a trigger, so a migration or an
// operator's SQL sends none. Its payload is the schema, so queues in
// different schemas of one database do not wake each other's workers. A
// notification that fails is logged and dropped: the write has committed
// and been reported, and idle workers poll.
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

// WakeNotifyEvery is the least time, on the queue's clock, between two
// notifications a queue sends: the first signal after a quiet spell is
// sent at once, the signals that follow within it leave one notification
// to send when it has passed. A busy submitter thus sends a few a second,
// not one a commit, and an idle worker waits at most this long past its
// first wake-up for the tasks committed just after it.
const WakeNotifyEvery = 20 * time.Millisecond

// madeReady marks the transaction as having made a task claimable, if it
// is due by now.
func (t *txn) madeReady(runAt time.Time) {
	if !runAt.After(t.now) {
		t.ready = true
	}
}

// readyCommitted is called after a commit that made a task claimable
// now: it wakes this process's idle workers (localwake.go) and, on
// PostgreSQL, signals the notifier that wakes every process's.
func (q *Queue) readyCommitted() {
	q.local.signal()
	q.notify.signal(q)
}

// readyNotifier sends the notifications of a queue's commits that made a
// task claimable, one at a time, on a goroutine of its own that starts at
// the first signal and ends at Close.
type readyNotifier struct {
	mu  sync.Mutex
	off bool // Options.NoWakeNotify, or a store that does not notify
	// kick holds the one pending signal; nil until the goroutine starts.
	kick chan struct{}
	// done is closed when the goroutine has ended.
	done chan struct{}
	// log receives a failed notification: the process's default logger.
	log *slog.Logger
}

// signal asks for a notification, starting the goroutine that sends it
// if it has not started; a closed queue sends none.
func (r *readyNotifier) signal(q *Queue) {
	r.mu.Lock()
	if r.off {
		r.mu.Unlock()
		return
	}
	if r.kick == nil {
		ctx, done, ok := q.wakes.add(context.Background())
		if !ok {
			r.off = true // closed
			r.mu.Unlock()
			return
		}
		r.kick, r.done = make(chan struct{}, 1), make(chan struct{})
		go func() {
			defer close(r.done)
			defer done()
			q.sendReady(ctx, r.kick, r.log)
		}()
	}
	kick := r.kick
	r.mu.Unlock()
	signal(kick)
}

// wait returns once the goroutine, if it started, has ended: Close calls
// it after ending the goroutine's context.
func (r *readyNotifier) wait() {
	r.mu.Lock()
	r.off = true
	done := r.done
	r.mu.Unlock()
	if done != nil {
		<-done
	}
}

// sendReady sends a notification for each signal on kick until ctx ends,
// at most one every WakeNotifyEvery (the signals meanwhile coalesce into
// the one pending on kick). A failure is logged once until a notification
// succeeds again.
func (q *Queue) sendReady(ctx context.Context, kick <-chan struct{}, log *slog.Logger) {
	n := q.store.Capabilities().Notify
	failing := false
	var sent time.Time // when the last notification was sent; zero: none yet
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
		}
		if !sent.IsZero() {
			if wait := sent.Add(WakeNotifyEvery).Sub(q.clock.Now()); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-q.clock.After(wait):
				}
			}
		}
		sent = q.clock.Now() // before the notification: a listener it wakes reads the clock after
		err := n.NotifyReady(notifyRunner{q: q, ctx: ctx})
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !failing:
			log.Warn("wake-up notification failed; idle workers poll", "db", q.path,
				"error", redact.Message(err, redact.Passwords(err.Error(), q.params.Path)).Error())
			failing = true
		case err == nil && failing:
			log.Info("wake-up notification sent again", "db", q.path)
			failing = false
		}
	}
}

// notifyRunner runs the notifier's statement outside any transaction,
// ended by ctx (Close).
type notifyRunner struct {
	q   *Queue
	ctx context.Context
}

// Query runs a named statement as its own transaction.
func (r notifyRunner) Query(name queryName, args ...any) (*sql.Rows, error) {
	return r.q.readRowsBare(r.ctx, name, args...)
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

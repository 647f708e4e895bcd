package queue

import (
	"context"
	"sync"
)

// Wake-ups within one process. SQLite has no LISTEN: a worker in another
// process over the same file learns of new work only by polling. But a
// commit that made a task claimable (txn.madeReady, as on PostgreSQL)
// wakes the idle workers of the process that committed it at once, so a
// caller and a worker sharing a *Queue (an embedded queue, the HTTP server
// with its workers) never wait out a poll interval. The wake-up is sent
// after the COMMIT returned, never for a write that rolled back, and is a
// hint: it changes no statement, and a lost one costs a poll interval.

// localWakes are the channels of the in-process Wake callers.
type localWakes struct {
	mu    sync.Mutex
	next  int
	chans map[int]chan struct{}
}

// add registers ch until remove is called.
func (l *localWakes) add(ch chan struct{}) (remove func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.chans == nil {
		l.chans = map[int]chan struct{}{}
	}
	id := l.next
	l.next++
	l.chans[id] = ch
	return func() {
		l.mu.Lock()
		delete(l.chans, id)
		l.mu.Unlock()
	}
}

// signal wakes every registered channel (each holds at most one wake-up).
func (l *localWakes) signal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ch := range l.chans {
		signal(ch)
	}
}

// wakeLocal returns a channel woken by this process's commits that made a
// task claimable, until ctx ends or the queue closes; nil once closed.
func (q *Queue) wakeLocal(ctx context.Context) <-chan struct{} {
	ctx, done, ok := q.wakes.add(ctx)
	if !ok {
		return nil
	}
	ch := make(chan struct{}, 1)
	remove := q.local.add(ch)
	context.AfterFunc(ctx, func() {
		remove()
		done()
	})
	return ch
}

// madeReady reports whether a member whose writes the commit keeps made a
// task claimable now.
func (g *group) madeReady() bool {
	for i, t := range g.txns {
		if t.ready && !g.alone[i] {
			return true
		}
	}
	return false
}

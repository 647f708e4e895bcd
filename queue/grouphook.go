package queue

import (
	"fmt"
	"sync"
)

// Hold is a hook the simulator alone uses to decide group commits itself.
// Production never sets it: there a group is what queued during the
// previous commit (group.go).
//
// While a queue is held, a grouped write does not run by itself: it
// becomes a HeldWrite, reported to the hook's arrive function on the
// writer's own goroutine, and waits. The simulator then commits a list of
// pending writes, in the order it chose, as one group through the
// production group writer (runGroup), without the leader's settle, and
// answers each write's caller only when it releases that write. So
// neither arrival order nor goroutine timing decides a group's members,
// their order or when their callers carry on.
//
// A write that takes the lead of its own (writeOpAlone) is not held.
type Hold struct {
	q      *Queue
	arrive func(*HeldWrite)
	mu     sync.Mutex
	// pending are the writes that arrived and are not committed yet, in
	// arrival order.
	pending []*HeldWrite
}

// HeldWrite is one write waiting in a held queue, or committed and not
// yet released to its caller.
type HeldWrite struct {
	m       *member
	release chan struct{}
}

// Hold makes q hold its grouped writes until Release of the returned
// Hold; arrive is told of each write as it arrives, on the writer's
// goroutine, before the writer waits. It is for the simulator alone, which
// must not call it while a write is under way.
func (q *Queue) Hold(arrive func(*HeldWrite)) *Hold {
	h := &Hold{q: q, arrive: arrive}
	q.hold = h
	return h
}

// Release stops holding: writes from now on run as usual. Every held
// write must have been committed and released.
func (h *Hold) Release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.pending) > 0 {
		panic(fmt.Sprintf("queue: hold released with %d writes pending", len(h.pending)))
	}
	h.q.hold = nil
}

// Pending returns the writes waiting for a group, in arrival order.
func (h *Hold) Pending() []*HeldWrite {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*HeldWrite(nil), h.pending...)
}

// await holds m until its group is committed and the hook releases it.
func (h *Hold) await(m *member) error {
	w := &HeldWrite{m: m, release: make(chan struct{})}
	h.mu.Lock()
	h.pending = append(h.pending, w)
	h.mu.Unlock()
	h.arrive(w)
	<-m.done
	<-w.release
	return m.err
}

// Commit runs members, pending writes in the order given, as one group
// through the production group writer, and answers each (its caller still
// waits for Release). A group of one runs as an operation alone does.
func (h *Hold) Commit(members []*HeldWrite) {
	if len(members) == 0 || len(members) > GroupMax {
		panic(fmt.Sprintf("queue: a held group of %d writes (1 to %d)", len(members), GroupMax))
	}
	group := make([]*member, len(members))
	h.mu.Lock()
	for i, w := range members {
		k := h.index(w)
		if k < 0 {
			h.mu.Unlock()
			panic("queue: committing a write that is not pending")
		}
		h.pending = append(h.pending[:k], h.pending[k+1:]...)
		group[i] = w.m
	}
	h.mu.Unlock()
	q := h.q
	if q.lead != nil {
		q.lead <- struct{}{}
		defer func() { <-q.lead }()
	}
	q.runGroup(group)
	q.commits.broadcast()
}

func (h *Hold) index(w *HeldWrite) int {
	for i, p := range h.pending {
		if p == w {
			return i
		}
	}
	return -1
}

// Op names the write's operation.
func (w *HeldWrite) Op() string { return w.m.op }

// Err returns the write's outcome, once its group is committed.
func (w *HeldWrite) Err() error {
	<-w.m.done
	return w.m.err
}

// Completes reports whether the write is a completion (Complete or
// CompleteAndClaim), which a group completes set-wise with the others.
func (w *HeldWrite) Completes() bool { return w.m.completes != nil }

// Release lets the write's caller carry on with its outcome.
func (w *HeldWrite) Release() { close(w.release) }

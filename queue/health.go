package queue

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/queue/internal/seam"
)

// StorageClass names the kind of storage failure an error is, as /healthz
// reports it (seam.Class).
type StorageClass = seam.Class

// The storage classes. Any other error (bad input, a stale claim, a
// missing task) is no storage failure and has no class.
const (
	ClassBusy       = seam.ClassBusy
	ClassDiskFull   = seam.ClassDiskFull
	ClassIO         = seam.ClassIO
	ClassReadOnly   = seam.ClassReadOnly
	ClassCantOpen   = seam.ClassCantOpen
	ClassCorrupt    = seam.ClassCorrupt
	ClassNoMemory   = seam.ClassNoMemory
	ClassConflict   = seam.ClassConflict
	ClassConnection = seam.ClassConnection
	ClassConstraint = seam.ClassConstraint
)

// ClassOf returns the storage class of err, or "" when err is no storage
// failure: the class the first store that knows err's driver error gives
// it.
func ClassOf(err error) StorageClass {
	if err == nil {
		return ""
	}
	for _, b := range backends {
		if c := b.Classify(err); c != "" {
			return c
		}
	}
	return ""
}

// healthProbeInterval bounds how often Health writes its probe: a check
// within it of the last probe (by the queue's clock) shares that probe's
// outcome.
const healthProbeInterval = time.Second

// health is what Health knows: the last probe, and the storage failures
// of the queue's writes since.
type health struct {
	// probeMu is held by the one probe running (and while its outcome is
	// read): concurrent checks wait for it and share its outcome.
	probeMu  sync.Mutex
	probedAt time.Time // the queue's clock when the last probe ran; zero before the first
	probeErr error     // the last probe's outcome
	clean    uint64    // failures counted when the last good probe began

	failMu   sync.Mutex
	failures uint64 // writes of this queue that failed in storage
	lastFail error  // the latest of them

	// diskFull is set when a write fails with a full disk (the low-space
	// mode), and cleared once the log is truncated and the disk has room
	// (truncateLogAfterDiskFull).
	diskFull atomic.Bool
}

// noteFailure counts err if it is a storage failure.
func (h *health) noteFailure(err error) {
	class := ClassOf(err)
	if class == "" {
		return
	}
	if class == ClassDiskFull {
		h.diskFull.Store(true)
	}
	h.failMu.Lock()
	defer h.failMu.Unlock()
	h.failures++
	h.lastFail = err
}

func (h *health) failure() (uint64, error) {
	h.failMu.Lock()
	defer h.failMu.Unlock()
	return h.failures, h.lastFail
}

// Health reports whether the queue can take writes now. It fails when its
// probe fails, or when any write of this queue (every caller, worker and
// request of the process sharing it) has failed in storage since the last
// good probe: on a full disk in WAL mode a small write can still succeed
// by reusing the log's frames while larger ones fail.
//
// The probe is a committed write of a value that changes every time (a
// counter in settings: a statement that changes no bytes writes nothing
// and proves nothing). Like every write after one that failed with a full
// disk, it first checkpoints a SQLite file's log with TRUNCATE
// (truncateLogAfterDiskFull), which is what gives a freed disk its room
// back. It runs at most once per healthProbeInterval of the
// queue's clock; checks in between, and checks made while a probe runs,
// share its outcome. A failed probe's error keeps its storage class (see
// ClassOf).
func (q *Queue) Health(ctx context.Context) error {
	if err := q.checkOpen("health"); err != nil {
		return err
	}
	h := &q.health
	h.probeMu.Lock()
	defer h.probeMu.Unlock()
	now := q.clock.Now()
	if h.probedAt.IsZero() || now.Sub(h.probedAt) >= healthProbeInterval || now.Before(h.probedAt) {
		seen, _ := h.failure()
		err := q.write(ctx, "health", func(t *txn) error { return t.execOne(qHealth) })
		h.probedAt, h.probeErr = now, err
		if err == nil {
			h.clean = seen
		}
	}
	if h.probeErr != nil {
		return fmt.Errorf("queue: unhealthy: %w", h.probeErr)
	}
	if n, err := h.failure(); n != h.clean {
		return fmt.Errorf("queue: unhealthy: a write failed in storage since the last good probe: %w", err)
	}
	return nil
}

package queue_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"modernc.org/sqlite"

	"github.com/leasehold/leasehold/faults/storagefault"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

var healthEpoch = time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)

// healthBundle is a queue on a database file under a storage injector.
type healthBundle struct {
	ctx     context.Context
	clock   *clockwork.FakeClock
	storage *storagefault.Storage
	q       *queue.Queue
}

func openHealth(t *testing.T, path string) *healthBundle {
	t.Helper()
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(healthEpoch)
	storage := storagefault.NewStorage(&sqlite.Driver{}, clock)
	q, err := queue.Open(ctx, queue.Options{Path: path, Clock: clock, IDs: model.NewSeededIDs(3), Driver: storage})
	require.NoError(t, err)
	t.Cleanup(func() { q.Close() })
	return &healthBundle{ctx: ctx, clock: clock, storage: storage, q: q}
}

func healthRequest(key string, payload string) model.SubmitRequest {
	return model.SubmitRequest{User: "ana", Key: key, Payload: payload, CostBudget: 10, StepsMax: 3}
}

// probeCount reads the health probe's counter.
func (b *healthBundle) probeCount(t *testing.T) int64 {
	t.Helper()
	var n int64
	require.NoError(t, queue.DBOf(b.q).QueryRowContext(b.ctx, "SELECT value FROM settings WHERE key = 'health_probe'").Scan(&n))
	return n
}

// requireUnhealthy checks that Health fails with a storage error of class.
func requireUnhealthy(t *testing.T, err error, class queue.StorageClass) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, class, queue.ClassOf(err), "%v", err)
}

// The probe is a committed write of a changing value, at most once a
// second of the queue's clock: concurrent checks share one probe.
func TestHealthProbeWritesAChangingValueOnceASecond(t *testing.T) {
	b := openHealth(t, filepath.Join(t.TempDir(), "h.db"))
	require.NoError(t, b.q.Health(b.ctx))
	require.Equal(t, int64(1), b.probeCount(t))
	commits := b.storage.Commits()
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = b.q.Health(b.ctx) }()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, commits, b.storage.Commits(), "checks within the second share the last probe")
	b.clock.Advance(time.Second)
	require.NoError(t, b.q.Health(b.ctx))
	require.Equal(t, int64(2), b.probeCount(t), "each probe changes the value it writes")
	require.Equal(t, commits+1, b.storage.Commits())
}

// A probe on a full disk fails with the class disk_full, and health comes
// back with the first good probe after the disk has room.
func TestHealthProbeFailsOnAFullDisk(t *testing.T) {
	b := openHealth(t, filepath.Join(t.TempDir(), "h.db"))
	require.NoError(t, b.q.Health(b.ctx))
	b.storage.SetDiskFull(true)
	b.clock.Advance(time.Second)
	requireUnhealthy(t, b.q.Health(b.ctx), queue.ClassDiskFull)
	b.storage.SetDiskFull(false)
	requireUnhealthy(t, b.q.Health(b.ctx), queue.ClassDiskFull) // the same second: the same probe
	b.clock.Advance(time.Second)
	require.NoError(t, b.q.Health(b.ctx))
}

// A write that failed in storage makes health fail until a probe after it
// succeeds, even while the probe itself would succeed (a small write on a
// full disk can reuse the log's frames).
func TestHealthFailsAfterAWriteFailedInStorage(t *testing.T) {
	b := openHealth(t, filepath.Join(t.TempDir(), "h.db"))
	require.NoError(t, b.q.Health(b.ctx))
	b.storage.SetDiskFull(true)
	_, err := b.q.Submit(b.ctx, healthRequest("k1", `{"steps":[]}`))
	require.Equal(t, queue.ClassDiskFull, queue.ClassOf(err), "%v", err)
	b.storage.SetDiskFull(false)
	requireUnhealthy(t, b.q.Health(b.ctx), queue.ClassDiskFull)

	// Refusals of bad input are no storage failure.
	b.clock.Advance(time.Second)
	require.NoError(t, b.q.Health(b.ctx))
	_, err = b.q.Submit(b.ctx, healthRequest("", `{}`))
	require.ErrorIs(t, err, model.ErrInvalidInput)
	require.NoError(t, b.q.Health(b.ctx))

	// A busy database is a storage failure of its own class.
	b.storage.Arm(storagefault.Busy)
	_, err = b.q.Submit(b.ctx, healthRequest("k2", `{"steps":[]}`))
	require.Error(t, err)
	requireUnhealthy(t, b.q.Health(b.ctx), queue.ClassBusy)
}

// On a real full disk (a small tmpfs, filled) the probe and a submit both
// fail as disk_full; once the disk has room, both succeed again.
func TestHealthOnARealFullDisk(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "small")
	require.NoError(t, os.Mkdir(dir, 0o755))
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (needs root and CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() { require.NoError(t, syscall.Unmount(dir, 0)) })
	b := openHealth(t, filepath.Join(dir, "h.db"))
	// Close before the unmount (cleanups run last in, first out).
	t.Cleanup(func() { b.q.Close() })
	_, err := b.q.Submit(b.ctx, healthRequest("k0", `{"steps":[]}`))
	require.NoError(t, err)
	require.NoError(t, b.q.Health(b.ctx))

	filler := filepath.Join(dir, "filler")
	fill(t, filler)
	b.clock.Advance(time.Second)
	requireUnhealthy(t, b.q.Health(b.ctx), queue.ClassDiskFull)
	big := `{"steps":[],"pad":"` + padding(32<<10) + `"}`
	_, err = b.q.Submit(b.ctx, healthRequest("k1", big))
	require.Equal(t, queue.ClassDiskFull, queue.ClassOf(err), "%v", err)
	requireUnhealthy(t, b.q.Health(b.ctx), queue.ClassDiskFull)

	require.NoError(t, os.Remove(filler))
	b.clock.Advance(time.Second)
	require.NoError(t, b.q.Health(b.ctx))
	_, err = b.q.Submit(b.ctx, healthRequest("k1", big))
	require.NoError(t, err)
}

// fill writes path until the file system has no room left.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	block := make([]byte, 4096)
	for range 1 << 12 { // 16 MiB bounds the loop; the tmpfs is far smaller
		if _, err := f.Write(block); err != nil {
			require.ErrorIs(t, err, syscall.ENOSPC)
			return
		}
	}
	t.Fatal("the file system never filled")
}

func padding(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'x'
	}
	return string(b)
}

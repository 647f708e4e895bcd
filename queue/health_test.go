package queue_test

import (
	"context"
	"errors"
	"fmt"
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
	dir := smallDisk(t)
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

// smallDiskBytes is the size of the file system smallDisk mounts.
const smallDiskBytes = 1 << 20

// smallDisk mounts a tmpfs of smallDiskBytes for the test (unmounted at
// its end) and returns its directory. Mounting needs root (and
// CAP_SYS_ADMIN): elsewhere the test skips, saying why, unless CI is set,
// where it must run.
func smallDisk(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "small")
	require.NoError(t, os.Mkdir(dir, 0o755))
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", smallDiskBytes)); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("cannot mount a tmpfs to fill, and CI is set: this test must run there (as root): %v", err)
		}
		t.Skipf("cannot mount a tmpfs to fill (needs root and CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() { require.NoError(t, syscall.Unmount(dir, 0)) })
	return dir
}

// fileSize is the size of the file at path, 0 if there is none.
func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	info, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	require.NoError(t, err)
	return info.Size()
}

// TestAFullDiskFreedAgainRecoversWithoutRestart: on a real 1 MiB file
// system, the queue works until a filler takes the rest of the disk:
// health is 503 (disk_full) and writes fail. Once the filler is removed,
// health is 200 again at the next probe, and the queue goes on working,
// without a restart, through more work than its log has room for: every
// write that fails for a full disk is followed by a checkpoint that
// truncates the log, so a retry succeeds (before, the log, which never
// reaches the auto-checkpoint's 1,000 pages on so small a disk, filled it
// again and every write failed from then on). Every acknowledged task is
// there at the end, and the log is back under a quarter of the disk.
func TestAFullDiskFreedAgainRecoversWithoutRestart(t *testing.T) {
	dir := smallDisk(t)
	path := filepath.Join(dir, "h.db")
	b := openHealth(t, path)
	t.Cleanup(func() { b.q.Close() }) // before the unmount
	var acked []string
	submit := func(key string) error {
		res, err := b.q.Submit(b.ctx, healthRequest(key, `{"steps":[{"cost":1}],"pad":"`+padding(1<<10)+`"}`))
		if err == nil {
			acked = append(acked, res.TaskID)
		}
		return err
	}
	for i := range 10 {
		require.NoError(t, submit(fmt.Sprintf("a%d", i)))
	}
	require.NoError(t, b.q.Health(b.ctx))

	filler := filepath.Join(dir, "filler")
	fill(t, filler)
	b.clock.Advance(time.Second)
	requireUnhealthy(t, b.q.Health(b.ctx), queue.ClassDiskFull)
	full := 0
	for i := 0; full == 0 && i < 100; i++ {
		if err := submit(fmt.Sprintf("f%d", i)); err != nil {
			require.Equal(t, queue.ClassDiskFull, queue.ClassOf(err), "%v", err)
			full++
		}
	}
	require.Equal(t, 1, full, "a write fails while the disk is full")
	requireUnhealthy(t, b.q.Health(b.ctx), queue.ClassDiskFull)
	t.Logf("full: database %d bytes, log %d bytes", fileSize(t, path), fileSize(t, path+"-wal"))

	require.NoError(t, os.Remove(filler))
	b.clock.Advance(time.Second)
	require.NoError(t, b.q.Health(b.ctx), "200 at the first probe once the disk has room")
	// Work: claims and completions of what is queued, and new submits,
	// each retried once if the disk fills (as a worker retries).
	const rounds = 100
	retried := 0
	retry := func(op func() error) {
		t.Helper()
		err := op()
		if err != nil && queue.ClassOf(err) == queue.ClassDiskFull {
			retried++
			err = op()
		}
		require.NoError(t, err, "log %d bytes", fileSize(t, path+"-wal"))
	}
	for i := range rounds {
		retry(func() error { return submit(fmt.Sprintf("w%d", i)) })
		retry(func() error {
			claimed, err := b.q.Claim(b.ctx, model.ClaimRequest{Worker: "w", Max: 1, Lease: time.Minute})
			if err != nil || len(claimed) == 0 {
				return err
			}
			return b.q.Complete(b.ctx, claimed[0].Claim)
		})
	}
	b.clock.Advance(time.Second)
	require.NoError(t, b.q.Health(b.ctx))
	for _, id := range acked {
		_, err := b.q.Task(b.ctx, id)
		require.NoError(t, err, "acknowledged task %s is there", id)
	}
	t.Logf("after %d rounds: %d writes retried after a full disk; database %d bytes, log %d bytes",
		rounds, retried, fileSize(t, path), fileSize(t, path+"-wal"))
	require.Less(t, fileSize(t, path+"-wal"), int64(smallDiskBytes/4), "the log gave its room back")
}

// TestAnInjectedFullDiskNeverGrowsTheLog: after a write fails with a full
// disk (injected), the next write first checkpoints the log with
// TRUNCATE, so the log is no longer than before the failure (it held ten
// submits' pages; it then holds one write's). Before, the next write
// appended to it. The health probe does the same after a failed write.
func TestAnInjectedFullDiskNeverGrowsTheLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.db")
	b := openHealth(t, path)
	for i := range 10 {
		_, err := b.q.Submit(b.ctx, healthRequest(fmt.Sprintf("k%d", i), `{"steps":[]}`))
		require.NoError(t, err)
	}
	for round, write := range []func() error{
		func() error { _, err := b.q.Submit(b.ctx, healthRequest("next", `{"steps":[]}`)); return err },
		func() error { b.clock.Advance(time.Second); return b.q.Health(b.ctx) },
	} {
		before := fileSize(t, path+"-wal")
		require.Positive(t, before)
		b.storage.SetDiskFull(true)
		_, err := b.q.Submit(b.ctx, healthRequest(fmt.Sprintf("full%d", round), `{"steps":[]}`))
		require.Equal(t, queue.ClassDiskFull, queue.ClassOf(err), "%v", err)
		require.Equal(t, before, fileSize(t, path+"-wal"), "the injected failure wrote nothing")
		b.storage.SetDiskFull(false)
		require.NoError(t, write())
		require.Less(t, fileSize(t, path+"-wal"), before, "the log was truncated before the write")
		for i := range 10 { // the log grows again, for the next round
			_, err := b.q.Submit(b.ctx, healthRequest(fmt.Sprintf("r%d-%d", round, i), `{"steps":[]}`))
			require.NoError(t, err)
		}
	}
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

package queue_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

func openRO(path string) (*queue.Queue, error) {
	return queue.Open(context.Background(), queue.Options{Path: path, Clock: clockwork.NewFakeClockAt(healthEpoch),
		IDs: model.NewSeededIDs(9), ReadOnly: true})
}

// A read-only open reads, refuses every write as read_only, and neither
// creates a schema in an empty file nor migrates an older one.
func TestReadOnlyOpen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ro.db")
	b := openHealth(t, path)
	res, err := b.q.Submit(b.ctx, healthRequest("k1", `{"steps":[]}`))
	require.NoError(t, err)
	require.NoError(t, b.q.Close())

	q, err := openRO(path)
	require.NoError(t, err)
	defer q.Close()
	task, err := q.Task(context.Background(), res.TaskID)
	require.NoError(t, err)
	require.Equal(t, model.Queued, task.State)
	_, err = q.Submit(context.Background(), healthRequest("k2", `{"steps":[]}`))
	require.Equal(t, queue.ClassReadOnly, queue.ClassOf(err), "%v", err)

	empty := filepath.Join(dir, "empty.db")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	_, err = openRO(empty)
	require.ErrorIs(t, err, queue.ErrNoSchema)
	st, err := os.Stat(empty)
	require.NoError(t, err)
	require.Zero(t, st.Size(), "no schema was created")

	old := filepath.Join(dir, "old.db")
	fixture, err := os.ReadFile(filepath.Join("testdata", "schema-v2.db"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(old, fixture, 0o644))
	_, err = openRO(old)
	require.ErrorIs(t, err, queue.ErrSchemaOutdated)
	after, err := os.ReadFile(old)
	require.NoError(t, err)
	require.Equal(t, fixture, after, "nothing was migrated")

	_, err = openRO(filepath.Join(dir, "missing.db"))
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = os.Stat(filepath.Join(dir, "missing.db"))
	require.ErrorIs(t, err, os.ErrNotExist, "a read-only open creates nothing")
}

// In a place nobody can write (a read-only bind mount), where SQLite's
// mode=ro cannot create the -shm a WAL reader needs, the file is read as
// immutable: no -wal is there, so every commit is in the file.
func TestReadOnlyOpenOnAReadOnlyMount(t *testing.T) {
	src := t.TempDir()
	path := filepath.Join(src, "ro.db")
	b := openHealth(t, path)
	res, err := b.q.Submit(b.ctx, healthRequest("k1", `{"steps":[]}`))
	require.NoError(t, err)
	require.NoError(t, b.q.Close())
	_, err = os.Stat(path + "-wal")
	require.ErrorIs(t, err, os.ErrNotExist, "the last close checkpointed and removed the -wal")

	ro := filepath.Join(t.TempDir(), "ro")
	require.NoError(t, os.Mkdir(ro, 0o755))
	if err := syscall.Mount(src, ro, "", syscall.MS_BIND, ""); err != nil {
		t.Skipf("cannot bind-mount (needs root and CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() { require.NoError(t, syscall.Unmount(ro, 0)) })
	require.NoError(t, syscall.Mount("", ro, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""))

	q, err := openRO(filepath.Join(ro, "ro.db"))
	require.NoError(t, err)
	defer q.Close()
	task, err := q.Task(context.Background(), res.TaskID)
	require.NoError(t, err)
	require.Equal(t, res.TaskID, task.ID)
	db, err := queue.OpenReadOnlyDB(context.Background(), filepath.Join(ro, "ro.db"))
	require.NoError(t, err)
	require.NoError(t, db.Close())
}

package queue

import (
	"context"
	"path/filepath"
	"syscall"

	"github.com/leasehold/leasehold/queue/internal/sqlite"
)

// DiskRoomMin is how much room a file database's file system must have
// for the queue to leave its low-space mode, which a write that fails
// with a full disk puts it in: four times JournalSizeLimit, a log's
// largest size between checkpoints with room to spare.
const DiskRoomMin = 4 * JournalSizeLimit

// JournalSizeLimit is the journal_size_limit of a file database
// (sqlite.JournalSizeLimit).
const JournalSizeLimit = sqlite.JournalSizeLimit

// truncateLogAfterDiskFull runs before a group's transaction while the
// queue is in its low-space mode (since a write of this queue failed with
// a full disk, until the file system has DiskRoomMin free): on a SQLite
// file it checkpoints the log with TRUNCATE (wal_truncate), which copies
// the log's pages into the database and empties the -wal file. Without
// it a disk that was full and has room again fills up anew: the
// auto-checkpoint waits for 1,000 pages of log, which a small disk may
// never hold, and until a checkpoint runs the log only grows, until the
// checkpoint itself has no room left to copy it. In the mode every write
// is preceded by the checkpoint (a slower write, and a log one group
// long); a checkpoint that fails (no room yet for the pages it copies) is
// simply tried again before the next write, or by the next health probe.
// In memory, and on PostgreSQL, there is no log to truncate.
func (q *Queue) truncateLogAfterDiskFull() {
	if !q.health.diskFull.Load() {
		return
	}
	if !q.store.Capabilities().WALTruncate || q.params.Path == Memory {
		q.health.diskFull.Store(false)
		return
	}
	var busy, frames, copied int64
	// The checkpoint is the queue's, not one caller's: no caller's
	// cancellation may end it.
	if err := q.readRow(context.Background(), qWalTruncate).Scan(&busy, &frames, &copied); err != nil {
		return
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(q.params.Path), &fs); err == nil && fs.Bavail*uint64(fs.Bsize) >= DiskRoomMin {
		q.health.diskFull.Store(false)
	}
}

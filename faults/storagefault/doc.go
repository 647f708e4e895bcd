// Package storagefault is the storage fault injector: a SQL driver that
// wraps the real one (modernc.org/sqlite) and fails on command, with
// storage unavailable for a window of the injected clock, a full disk, a
// failed begin, a statement that reads as an I/O error, a busy database,
// a commit that fails and a commit that succeeds but reports failure.
// NewPostgres wraps pgx's driver with the same fault plan, each fault
// read as what a PostgreSQL server and its connections do (a SQLSTATE;
// a lost connection closed, its transaction rolled back, and replaced).
//
// It imports neither worker nor queue, so that queue's own tests can use
// it; package faults gives its names to the simulator and the live run
// beside the other injectors. Its errors are Errors, wrapping ErrInjected,
// which faults' injectors wrap too.
//
//	storage := storagefault.NewStorage(&sqlite.Driver{}, clock)
//	q, err := queue.Open(ctx, queue.Options{..., Driver: storage, BusyTimeout: queue.NoBusyTimeout})
//	storage.Arm(storagefault.AmbiguousCommit) // the next commit applies, then reports failure
//	storage.SetUnavailableUntil(clock.Now().Add(5 * time.Second))
//	storage.Bypass(func() { /* an observer's reads, untouched by faults */ })
//
// Nothing here decides when a fault happens: a test or the simulator arms
// each, and the next matching operation consumes it. Storage is safe for
// concurrent use; its String() describes what is armed and what has fired.
package storagefault

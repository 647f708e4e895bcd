// Package faults wraps the real interfaces the queue and its workers use
// with injectors that make them fail on command: the SQL driver (storage
// unavailable, busy, I/O error on a statement, a commit that fails, a
// commit that succeeds but reports failure), the worker's external service
// (a lost response, an outage), the worker's queue (a write delivered
// twice, at once or late) and a worker process (crash and restart, stall
// and resume).
//
// The SQL driver's injector is package faults/storagefault's, which
// imports neither worker nor queue so that queue's own tests can use it
// (worker imports queue); its names are also this package's (Storage,
// StorageFault, NewStorage and the faults), as os.FileMode is fs.FileMode.
//
// Nothing here decides when a fault happens. There is no internal
// randomness and no wall clock: the simulator (or a test) arms a fault
// explicitly, the next matching operation consumes it, and a storage
// outage window is measured against the injected clockwork.Clock. So a run
// that arms the same faults at the same points fails the same way.
//
// Every injected error wraps ErrInjected (test with errors.Is) and its
// message names the fault. Every injector has a deterministic String() that
// describes what is armed and what has fired, for traces and reports.
//
// # Usage
//
//	storage := faults.NewStorage(&sqlite.Driver{}, clock)
//	q, err := queue.Open(ctx, queue.Options{..., Driver: storage, BusyTimeout: queue.NoBusyTimeout})
//	storage.Arm(faults.AmbiguousCommit) // the next commit applies, then reports failure
//	storage.SetUnavailableUntil(clock.Now().Add(5 * time.Second))
//	storage.Bypass(func() { /* an observer's reads, untouched by faults */ })
//
//	// The same fault plan on PostgreSQL, each fault read as the server's
//	// (a SQLSTATE), a lost connection closed and replaced:
//	pg := faults.NewPostgresStorage(stdlib.GetDefaultDriver(), clock)
//	q, err := queue.Open(ctx, queue.Options{Path: url, ..., Driver: pg})
//
//	wq := faults.NewQueue(q)       // hand wq to worker.Config.Queue
//	wq.ArmDuplicate()              // the next fenced write is delivered twice
//	wq.DuplicateEvery("complete")  // every completion is delivered twice
//	wq.ArmHold()                   // the next fenced write is kept ...
//	wq.Redeliver()                 // ... and delivered again, late
//	svc := faults.NewService(real) // hand svc to worker.Config.Service
//	svc.ArmLostResponse()          // the next call's reply is lost
//
//	p := faults.NewProcess("w1")   // crash, restart, stall and resume bookkeeping
//
// All injectors are safe for concurrent use.
package faults

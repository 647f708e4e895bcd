// Command peers runs leasehold beside River (on its SQLite driver) and
// goqite on the same machine, in the same run: the same jobs, the same
// SQLite build (modernc.org/sqlite), the same PRAGMAs, file databases in
// WAL, under synchronous=FULL and NORMAL.
//
// It is a module of its own so that the main module never depends on a
// peer. It is a benchmark: unlike the packages it measures, it reads the
// wall clock, and its figures are only meaningful as ratios between
// systems measured in interleaved rounds of the same run.
//
// # Usage
//
//	make bench-peers                      # from the repository root
//	cd bench/peers && go run . -rounds 3 -jobs 1500
//
// Workloads (each under FULL and NORMAL):
//
//   - work: N pre-inserted no-op jobs burned down by 10 workers in one
//     process; the same with 2 workers; a task of 3 steps with 10 workers.
//   - intake: N jobs inserted one at a time, and in bulk (River's
//     InsertMany, one call; leasehold's SubmitMany, one transaction per
//     SubmitBatchMax requests; goqite's sends in one transaction).
//   - latency: one job through an idle queue, submit to completed; the
//     two leasehold variants take turns job by job, so both see the same disk.
//
// On PostgreSQL (leasehold's store and River on its pgx driver, one server,
// a schema per run), each cell runs with 1, 2 and 4 processes (-procs):
// the bench starts itself again as child processes (-child), each with 10
// workers (work) or one caller (intake), and times them from a common go
// to the last job. Beside the rate it reports the clients' CPU per job and
// the server's: the CPU of the run's own backends (found in
// pg_stat_activity by application_name, read from /proc), so the server
// must run on this machine. On a machine of few cores more processes
// measure contention for the server, not scale-out; the report states the
// host, its cores and its load.
//
// Every figure is the median of the rounds; ratios are of medians.
package main

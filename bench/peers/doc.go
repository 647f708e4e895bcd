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
// Every figure is the median of the rounds; ratios are of medians.
package main

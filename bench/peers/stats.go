package main

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"
)

// median returns the median of xs (the upper one of an even count), or 0
// for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// sample is one measured run: how long it took, the CPU the process spent
// in it, and how many jobs it moved.
type sample struct {
	wall, cpu time.Duration
	jobs      int
	// retried counts writes that failed in storage and were retried (by
	// leasehold's worker, or by the goqite consumer loop): busy timeouts
	// under lock contention, mostly.
	retried int
	// groups and groupOps are leasehold's group commits in the run and the
	// write operations they carried.
	groups, groupOps int64
	// sizes is leasehold's histogram of group sizes (see formatSizes);
	// claimWrites and claimed count its worker's claim writes and the
	// tasks they took.
	sizes                string
	claimWrites, claimed int64
	// fused counts leasehold's groups run as one statement (PostgreSQL).
	fused int64
	// pages counts the pages leasehold's SQLite commits wrote (one WAL
	// frame each; see pageCounter).
	pages int64
	// server is the CPU the local PostgreSQL server's processes spent in
	// the run (zero when the server is not on this machine: see
	// serverCPU).
	server time.Duration
	// whole is the CPU of every process of the local server in a
	// PostgreSQL cell's run (server is its own backends'; see backendCPU).
	whole time.Duration
}

func (s sample) rate() float64 { return float64(s.jobs) / s.wall.Seconds() }

// cpuPerJob is the CPU spent per job, in microseconds.
func (s sample) cpuPerJob() float64 { return float64(s.cpu.Microseconds()) / float64(s.jobs) }

// serverPerJob is the local PostgreSQL server's CPU per job, in
// microseconds (zero when not measured).
func (s sample) serverPerJob() float64 { return float64(s.server.Microseconds()) / float64(s.jobs) }

// wholePerJob is every local server process's CPU per job, in
// microseconds (zero when not measured).
func (s sample) wholePerJob() float64 { return float64(s.whole.Microseconds()) / float64(s.jobs) }

// measure runs fn, which moves jobs jobs, timing it, its CPU and the
// local PostgreSQL server's.
func measure(jobs int, fn func() error) (sample, error) {
	srv0, ok0 := serverCPU()
	cpu0, t0 := cpuTime(), time.Now()
	err := fn()
	smp := sample{wall: time.Since(t0), cpu: cpuTime() - cpu0, jobs: jobs}
	if srv1, ok1 := serverCPU(); ok0 && ok1 && srv1 > srv0 {
		smp.server = srv1 - srv0
	}
	return smp, err
}

// formatRates renders per-round rates for the log.
func formatRates(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(parts, " ")
}

// ratio formats a/b, or "-" when either is missing.
func ratio(a, b float64) string {
	if a == 0 || b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// formatSizes renders a histogram of group sizes (counts[k] groups of k
// operations) in power-of-two buckets, each as the share of the
// operations that groups of its sizes carried: "1:40% 2:25% 3-4:35%".
func formatSizes(counts []int64) string {
	var ops int64
	for k, n := range counts {
		ops += int64(k) * n
	}
	if ops == 0 {
		return ""
	}
	var parts []string
	for lo := 1; lo < len(counts); lo *= 2 {
		hi := min(2*lo-1, len(counts)-1)
		var carried int64
		for k := lo; k <= hi; k++ {
			carried += int64(k) * counts[k]
		}
		if carried == 0 {
			continue
		}
		name := fmt.Sprint(lo)
		if hi > lo {
			name = fmt.Sprintf("%d-%d", lo, hi)
		}
		parts = append(parts, fmt.Sprintf("%s:%.0f%%", name, 100*float64(carried)/float64(ops)))
	}
	return strings.Join(parts, " ")
}

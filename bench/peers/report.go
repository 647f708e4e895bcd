package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// The names the report compares. Leasehold runs with group commit
// (leaseholdName) and without (leaseholdUngroupedName); goqite runs with
// each consumer count of -goqite-consumers and is reported at its best.
const (
	leaseholdName          = "leasehold"
	leaseholdUngroupedName = "leasehold-ungrouped"
	riverName              = "river"
	goqitePrefix           = "goqite"
	leaseholdPGName        = "leasehold-pg"
	// leaseholdPGUnlimitedName is leasehold-pg without the per-user
	// running limit (-pg-unlimited), in the work cells only.
	leaseholdPGUnlimitedName = "leasehold-pg-unlimited"
	riverPGName              = "river-pgx"
)

// summary is the median figures of one system in one cell.
type summary struct {
	name        string
	rate, cpu   float64 // jobs/s, µs CPU per job
	server      float64 // µs of the PostgreSQL server's CPU per job (its backends')
	rates       []float64
	ok          bool
	latency     time.Duration
	latencyRuns int
}

func (b *bench) summarize(key, name string) summary {
	if ds, ok := b.latencies[key][name]; ok {
		return summary{name: name, latency: medianDuration(ds), latencyRuns: len(ds), ok: true}
	}
	smps := b.results[key][name]
	if len(smps) == 0 {
		return summary{name: name}
	}
	var rates, cpus, servers []float64
	for _, s := range smps {
		rates, cpus, servers = append(rates, s.rate()), append(cpus, s.cpuPerJob()), append(servers, s.serverPerJob())
	}
	return summary{name: name, rate: median(rates), cpu: median(cpus), server: median(servers), rates: rates, ok: true}
}

// bestGoqite is goqite's best median rate in a cell, among its consumer
// counts.
func (b *bench) bestGoqite(key string) summary {
	var best summary
	for name := range b.results[key] {
		if !strings.HasPrefix(name, goqitePrefix) {
			continue
		}
		if s := b.summarize(key, name); s.rate > best.rate {
			best = s
		}
	}
	if best.ok {
		return best
	}
	for name := range b.latencies[key] {
		if strings.HasPrefix(name, goqitePrefix) {
			return b.summarize(key, name)
		}
	}
	return best
}

// report prints the medians and the ratios the goals are stated in.
func (b *bench) report(cells []cell, systems []system) {
	out := b.out
	fmt.Fprintf(out, "\nmedians of %d rounds (jobs/s; µs of process CPU per job in brackets; on PostgreSQL,\n"+
		"the clients' processes' and the server's backends' CPU per job)\n", b.cfg.rounds)
	for _, c := range cells {
		key := c.String()
		lh, lhu := b.summarize(key, leaseholdName), b.summarize(key, leaseholdUngroupedName)
		rv, gq := b.summarize(key, riverName), b.bestGoqite(key)
		// The peers are set against leasehold as it runs by default;
		// a build without group commit has only the ungrouped figures.
		peer := lh
		if !peer.ok {
			peer = lhu
		}
		if c.sync == pgSync {
			lhp, rvp := b.summarize(key, leaseholdPGName), b.summarize(key, riverPGName)
			fmt.Fprintf(out, "%-44s %s  %s\n", key, pgCol(lhp), pgCol(rvp))
			fmt.Fprintf(out, "%-44s leasehold-pg/river-pgx %s, server CPU/job %s\n", "", ratio(lhp.rate, rvp.rate), ratio(lhp.server, rvp.server))
			if lhn := b.summarize(key, leaseholdPGUnlimitedName); lhn.ok {
				// Not the headline: River has no per-user limit, so the
				// unlimited cell shows what leasehold's limit costs.
				fmt.Fprintf(out, "%-44s without the user limit: %s\n", "", pgCol(lhn))
				fmt.Fprintf(out, "%-44s leasehold-pg-unlimited/river-pgx %s, server CPU/job %s; limited/unlimited %s\n", "",
					ratio(lhn.rate, rvp.rate), ratio(lhn.server, rvp.server), ratio(lhp.rate, lhn.rate))
			}
			continue
		}
		if c.kind == "latency" {
			fmt.Fprintf(out, "%-34s %s  %s  %s  %s  grouped/ungrouped %s\n", key,
				latencyCol(lh), latencyCol(lhu), latencyCol(rv), latencyCol(gq),
				ratio(float64(lh.latency), float64(lhu.latency)))
			continue
		}
		fmt.Fprintf(out, "%-34s %s  %s  %s  %s\n", key, rateCol(lh), rateCol(lhu), rateCol(rv), rateCol(gq))
		fmt.Fprintf(out, "%-34s leasehold/river %s  leasehold/goqite %s  grouped/ungrouped %s\n", "",
			ratio(peer.rate, rv.rate), ratio(peer.rate, gq.rate), ratio(lh.rate, lhu.rate))
	}
	fmt.Fprintln(out, "\nper round (jobs/s):")
	for _, c := range cells {
		key := c.String()
		names := slices.Sorted(maps.Keys(b.results[key]))
		for _, name := range names {
			s := b.summarize(key, name)
			fmt.Fprintf(out, "  %-44s %-22s %s\n", key, name, formatRates(s.rates))
		}
	}
}

func rateCol(s summary) string {
	if !s.ok {
		return fmt.Sprintf("%s -", s.name)
	}
	return fmt.Sprintf("%s %.0f [%.0f]", s.name, s.rate, s.cpu)
}

func pgCol(s summary) string {
	if !s.ok {
		return fmt.Sprintf("%s -", s.name)
	}
	return fmt.Sprintf("%s %.0f [client %.0f, server %.0f]", s.name, s.rate, s.cpu, s.server)
}

func latencyCol(s summary) string {
	if !s.ok {
		return fmt.Sprintf("%s -", s.name)
	}
	return fmt.Sprintf("%s %v", s.name, s.latency.Round(10*time.Microsecond))
}

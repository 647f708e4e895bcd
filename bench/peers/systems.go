package main

import "github.com/leasehold/leasehold/queue"

func ungrouped(o *queue.Options) { o.Ungrouped = true }

// allSystems lists the systems of a run: leasehold with group commit (its
// default) and without, River, and goqite at each consumer count, on
// SQLite; leasehold and River on PostgreSQL, and with -pg-unlimited
// leasehold without its per-user running limit in the PostgreSQL work
// cells.
func allSystems(cfg config) []system {
	systems := []system{leasehold{label: leaseholdName}, leasehold{label: leaseholdUngroupedName, options: ungrouped}, riverQ{}}
	for _, c := range cfg.goqiteConsumers {
		systems = append(systems, goq{consumers: c})
	}
	systems = append(systems, leasehold{label: leaseholdPGName, pg: true})
	if cfg.pgUnlimited {
		systems = append(systems, leasehold{label: leaseholdPGUnlimitedName, pg: true, unlimited: true})
	}
	return append(systems, riverPG{})
}

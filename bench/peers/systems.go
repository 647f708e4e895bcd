package main

import "github.com/leasehold/leasehold/queue"

func ungrouped(o *queue.Options) { o.Ungrouped = true }

// allSystems lists the systems of a run: leasehold with group commit (its
// default) and without, River, and goqite at each consumer count, on
// SQLite; leasehold and River on PostgreSQL.
func allSystems(cfg config) []system {
	systems := []system{leasehold{label: leaseholdName}, leasehold{label: leaseholdUngroupedName, options: ungrouped}, riverQ{}}
	for _, c := range cfg.goqiteConsumers {
		systems = append(systems, goq{consumers: c})
	}
	return append(systems, leasehold{label: leaseholdPGName, pg: true}, riverPG{})
}

package main

// allSystems lists the systems of a run: leasehold, River, and goqite at
// each consumer count.
func allSystems(cfg config) []system {
	systems := []system{leasehold{label: leaseholdUngroupedName}, riverQ{}}
	for _, c := range cfg.goqiteConsumers {
		systems = append(systems, goq{consumers: c})
	}
	return systems
}

package sim

import (
	"hash/fnv"
	"math/rand/v2"
)

// Subsystems that draw from their own random source, split from the root
// seed so that changing one (say, the fault mix) leaves the others' draws
// unchanged.
const (
	streamScheduler = "scheduler"
	streamMix       = "mix" // which faults a run injects, and how often
	streamFaults    = "faults"
	streamJitter    = "jitter"
	streamIDs       = "ids"
	streamRefill    = "refill" // whether the workers claim with their completions
	// The group events of a schedule, and the order a group's members
	// commit in (world_groups.go).
	streamGroups     = "groups"
	streamGroupOrder = "group_order"
)

// subSeed derives a subsystem's seed from the root seed.
func subSeed(root uint64, stream string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(stream))
	z := root ^ h.Sum64()
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// source returns a seeded random source for one subsystem.
func source(root uint64, stream string) *rand.Rand {
	s := subSeed(root, stream)
	return rand.New(rand.NewPCG(s, s^0xda3e39cb94b95bdb))
}

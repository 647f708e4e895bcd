//go:build !leasehold_broken

// Package broken switches on the broken variants: builds of the production
// code with one safety mechanism removed, which the simulator must catch.
// They exist only under the leasehold_broken build tag; without it On is
// always false and the compiler removes the checks.
package broken

// On reports whether a broken variant is switched on: never, without the
// leasehold_broken build tag.
func On(string) bool { return false }

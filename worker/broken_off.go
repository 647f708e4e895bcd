//go:build !leasehold_broken

package worker

// broken reports whether a broken variant is switched on. Without the
// leasehold_broken build tag there are none.
func broken(string) bool { return false }

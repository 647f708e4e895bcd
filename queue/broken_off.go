//go:build !leasehold_broken

package queue

import "io/fs"

// broken reports whether a broken variant is switched on. Without the
// leasehold_broken build tag there are none: the safety mechanisms are
// always in place, and the compiler removes the checks.
func broken(string) bool { return false }

// brokenQueries adds no queries without the leasehold_broken build tag.
func brokenQueries(fs.FS, map[string]string) error { return nil }

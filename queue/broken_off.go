//go:build !leasehold_broken

package queue

// brokenQueries adds no queries without the leasehold_broken build tag.
func brokenQueries(map[string]string) error { return nil }

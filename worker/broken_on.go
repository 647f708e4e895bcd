//go:build leasehold_broken

package worker

import (
	"os"
	"strings"
)

// broken reports whether the broken variant named name is switched on by
// the LEASEHOLD_BROKEN environment variable (a comma-separated list). Each
// variant removes one safety mechanism from the production code, so the
// simulator's tests can show that the harness catches its absence. This
// file is compiled only with the leasehold_broken build tag.
func broken(name string) bool {
	for _, v := range strings.Split(os.Getenv("LEASEHOLD_BROKEN"), ",") {
		if strings.TrimSpace(v) == name {
			return true
		}
	}
	return false
}

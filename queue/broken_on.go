//go:build leasehold_broken

package queue

import (
	"errors"
	"fmt"
	"io/fs"
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

// brokenQueries adds the broken variants' queries, from the dialect's
// broken.sql when it has one.
func brokenQueries(files fs.FS, queries map[string]string) error {
	body, err := fs.ReadFile(files, "broken.sql")
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("broken.sql: %w", err)
	}
	if err := parseQueries(string(body), queries); err != nil {
		return fmt.Errorf("broken.sql: %w", err)
	}
	return nil
}

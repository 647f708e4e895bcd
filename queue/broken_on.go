//go:build leasehold_broken

package queue

import (
	_ "embed"
	"fmt"
)

//go:embed sql/sqlite/broken.sql
var brokenSQL string

// brokenQueries adds the broken variants' queries.
func brokenQueries(queries map[string]string) error {
	if err := parseQueries(brokenSQL, queries); err != nil {
		return fmt.Errorf("broken.sql: %w", err)
	}
	return nil
}

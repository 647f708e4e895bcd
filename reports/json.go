package reports

import (
	"encoding/json"
	"fmt"
	"io"
)

// JSON writes the report as indented JSON, its fields in the order of the
// structs. It refuses a report that Validate refuses, before writing
// anything.
func JSON(w io.Writer, r Report) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("json report: %w", err)
	}
	encoder := json.NewEncoder(w)
	encoder.SetIndent("", "  ")
	encoder.SetEscapeHTML(false)
	if err := encoder.Encode(r); err != nil {
		return fmt.Errorf("json report: %w", err)
	}
	return nil
}

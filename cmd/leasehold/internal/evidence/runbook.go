package evidence

import (
	"bytes"
	"encoding/json"
	"strings"
)

// RunbookResults reads go test -json output and returns each
// TestRunbook* test's verdict.
func RunbookResults(b []byte) map[string]bool {
	results := map[string]bool{}
	for _, line := range bytes.Split(b, []byte("\n")) {
		var ev struct {
			Action string `json:"Action"`
			Test   string `json:"Test"`
		}
		if json.Unmarshal(line, &ev) != nil || !strings.HasPrefix(ev.Test, "TestRunbook") || strings.Contains(ev.Test, "/") {
			continue
		}
		switch ev.Action {
		case "pass":
			results[ev.Test] = true
		case "fail":
			results[ev.Test] = false
		}
	}
	return results
}

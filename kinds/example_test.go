package kinds_test

import (
	"fmt"

	"github.com/leasehold/leasehold/kinds"
)

// A kinds file with one kind whose payloads need a month; a refusal names
// the path and the rule, never the value.
func Example() {
	f, err := kinds.Parse([]byte(`{"kinds": {"report": {
		"schema": {"type": "object", "required": ["month"],
		           "properties": {"month": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}$"}}},
		"worker": {"command": ["python3", "report.py"], "service": "dedup"}}}}`), ".")
	if err != nil {
		fmt.Println(err)
		return
	}
	check := f.Validator("report")
	fmt.Println(check([]byte(`{"month": "2026-11"}`)))
	fmt.Println(check([]byte(`{"month": "last one"}`)))
	fmt.Println(check([]byte(`{}`)))
	// Output:
	// <nil>
	// month: breaks the schema's pattern rule
	// month: required by the schema
}

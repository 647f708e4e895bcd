package queue

import "database/sql/driver"

// driverValue and its helpers build driver.NamedValue lists for the
// argument-order tests.
type driverValue = driver.NamedValue

func namedValues2(vs ...driverValue) []driver.NamedValue { return vs }

func valuesOf(vs []driver.NamedValue) []any {
	out := make([]any, len(vs))
	for i, v := range vs {
		out[i] = v.Value
	}
	return out
}

func ordinalsOf(vs []driver.NamedValue) []int {
	out := make([]int, len(vs))
	for i, v := range vs {
		out[i] = v.Ordinal
	}
	return out
}

package model

import (
	"strconv"
	"strings"
)

// taskIDLenMax is the longest string CheckTaskID accepts.
const taskIDLenMax = 64

// CheckTaskID refuses what cannot be a task ID (TaskIDPrefix followed by
// lowercase hex digits) before it reaches a query. The refusal is a
// *ValidationError for field "task".
func CheckTaskID(id string) error {
	digits, ok := strings.CutPrefix(id, TaskIDPrefix)
	valid := ok && digits != "" && len(id) <= taskIDLenMax
	for _, r := range digits {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			valid = false
		}
	}
	if !valid {
		return invalid("task", "%s is not a task ID (t_ followed by hex digits)", strconv.Quote(id))
	}
	return nil
}

// CheckOperationID refuses what cannot be an operation ID (a task ID,
// ".s" and a step number, as OperationID makes them) before it reaches a
// query. The refusal is a *ValidationError for field "operation".
func CheckOperationID(op string) error {
	task, step, ok := strings.Cut(op, ".s")
	n, err := strconv.Atoi(step)
	if !ok || CheckTaskID(task) != nil || err != nil || n < 0 || OperationID(task, n) != op {
		return invalid("operation", "%s is not an operation ID (TASK.sSTEP, as inspect shows)", strconv.Quote(op))
	}
	return nil
}

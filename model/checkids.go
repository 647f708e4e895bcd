package model

import (
	"fmt"
	"strconv"
	"strings"
)

// taskIDLenMax is the longest task ID: TaskIDPrefix and up to 62
// characters.
const taskIDLenMax = 64

// TaskIDRule is the rule of a task ID in words, as refusals state it.
// TaskIDPattern is the same rule as a regular expression (the API
// document's pattern for a task ID). The characters leave out '.', which
// separates a task ID from the step of an operation ID and the attempt of
// an attempt ID.
const (
	TaskIDRule    = "t_ followed by 1 to 62 letters, digits or hyphens"
	TaskIDPattern = "^t_[A-Za-z0-9-]{1,62}$"
)

// CheckTaskID refuses what cannot be a task ID (TaskIDRule) before it
// reaches a query: the one rule the queue holds its ID source's task IDs
// to (CheckNewTaskID), and the command line and the API hold the IDs they
// are given to. The refusal is a *ValidationError for field "task".
func CheckTaskID(id string) error {
	digits, ok := strings.CutPrefix(id, TaskIDPrefix)
	valid := ok && digits != "" && len(id) <= taskIDLenMax
	for _, r := range digits {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-') {
			valid = false
		}
	}
	if !valid {
		return invalid("task", "%s is not a task ID (%s)", strconv.Quote(id), TaskIDRule)
	}
	return nil
}

// CheckNewTaskID refuses a task ID an IDSource handed out that breaks
// TaskIDRule, with ErrBadIDSource: such a task could not be named to the
// command line or the API afterwards, so it is never stored.
func CheckNewTaskID(id string) error {
	if CheckTaskID(id) != nil {
		return fmt.Errorf("the ID source gave %s, which is not a task ID (%s): %w", strconv.Quote(id), TaskIDRule, ErrBadIDSource)
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

package model

import (
	"fmt"
	"time"
	"unicode/utf8"
)

// The Detail strings of audit events. The queue and Reference both build
// them here, so the oracle comparison covers them too. None holds payload
// contents.

// DetailStep describes a completed step.
func DetailStep(index int, cost int64) string { return fmt.Sprintf("step %d cost %d", index, cost) }

// DetailStale describes a refused worker write: which write and why.
func DetailStale(write Write, why string) string { return string(write) + ": " + why }

// DetailRetry describes a requeue after a charged attempt.
func DetailRetry(charged, attemptsMax int, delay time.Duration) string {
	return fmt.Sprintf("attempt %d of %d charged; retry in %dms", charged, attemptsMax, delay.Milliseconds())
}

// DetailDeadLetter describes a dead-lettering: the charged attempt that
// used the last one allowed. Nothing is retried, so no delay is named.
func DetailDeadLetter(charged, attemptsMax int) string {
	return fmt.Sprintf("attempt %d of %d charged; no attempts left, to review", charged, attemptsMax)
}

// DetailGrant describes an operator's requeue grant.
func DetailGrant(g Grant) string { return fmt.Sprintf("grant cost %d steps %d", g.Cost, g.Steps) }

// DetailPause names the gate a task paused at and the version it recorded.
func DetailPause(gate string, version int64) string {
	return fmt.Sprintf("gate %s version %d", gate, version)
}

// DetailSchedule names the schedule an added or removed schedule event
// concerns.
func DetailSchedule(scheduleID string) string { return "schedule " + scheduleID }

// DetailLimits describes a change of limits.
func DetailLimits(l Limits) string {
	return fmt.Sprintf("depth_max=%d user_depth_max=%d user_running_max=%d attempts_max=%d grant_cost_max=%d grant_steps_max=%d claim_batch_max=%d",
		l.DepthMax, l.UserDepthMax, l.UserRunningMax, l.AttemptsMax, l.GrantCostMax, l.GrantStepsMax, l.ClaimBatchMax)
}

// DetailUserLimit describes a change of one user's limits.
func DetailUserLimit(u UserLimit) string {
	return fmt.Sprintf("user %s running_max=%d depth_max=%d", u.User, u.RunningMax, u.DepthMax)
}

// DetailEffectSettled describes an operator's settlement of an uncertain
// effect.
func DetailEffectSettled(opID string, applied bool) string {
	if applied {
		return "operator recorded " + opID + " as applied"
	}
	return "operator recorded " + opID + " as not applied"
}

// TruncateMessage bounds a failure message (a handler's own, stored as
// the task's last_error) to its first ErrorMessageMax bytes, cut back to
// the last whole UTF-8 character so that a multi-byte character is never
// split.
func TruncateMessage(s string) string {
	if len(s) <= ErrorMessageMax {
		return s
	}
	end := ErrorMessageMax
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end]
}

// Tally adds n events of one (kind, from, to, reason) to the totals in
// m. State-changing events count by the state they reach; stale writes
// and lease expiries by kind.
func Tally(m *Metrics, kind EventKind, from, to State, reason Reason, n int64) {
	m.addTotals(EventCounts(kind, from, to, reason, n))
}

// TallyKind adds n events of one (kind, from, to, reason) whose task is
// of taskKind (KindUnknown for none) to the totals in m and to the counts
// of taskKind in m.ByKind.
func TallyKind(m *Metrics, taskKind string, kind EventKind, from, to State, reason Reason, n int64) {
	c := EventCounts(kind, from, to, reason, n)
	m.addTotals(c)
	m.AddKind(taskKind, c)
}

// EventCounts returns what n events of one (kind, from, to, reason) add
// to the outcome counters.
func EventCounts(kind EventKind, from, to State, reason Reason, n int64) Counts {
	var c Counts
	switch kind {
	case EventSubmitted:
		c.Submitted += n
	case EventStaleWrite:
		c.StaleWrites += n
	case EventRetry:
		c.Retries += n
	case EventLeaseExpired:
		c.LeaseExpiries += n
		if to == Queued {
			c.Retries += n
		}
	}
	if from == to || kind == EventSubmitted {
		return c
	}
	switch to {
	case Completed:
		c.Completions += n
	case Failed:
		c.Failures += n
		if reason == BudgetExhausted {
			c.BudgetExhausted += n
		}
	case Cancelled:
		c.Cancellations += n
	case NeedsReview:
		c.Reviews += n
	}
	return c
}

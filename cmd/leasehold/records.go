package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/leasehold/leasehold/model"
)

// taskRecord is a task as --json prints it: snake_case, times RFC 3339 UTC.
type taskRecord struct {
	ID              string `json:"id"`
	User            string `json:"user"`
	Key             string `json:"key"`
	State           string `json:"state"`
	Reason          string `json:"reason"`
	Version         int64  `json:"version"`
	Attempt         int    `json:"attempt"`
	AttemptsCharged int    `json:"attempts_charged"`
	AttemptsMax     int    `json:"attempts_max"`
	AttemptsFailed  int    `json:"attempts_failed"` // over the task's life: a requeue does not reset it
	CostUsed        int64  `json:"cost_used"`
	CostBudget      int64  `json:"cost_budget"`
	StepsUsed       int    `json:"steps_used"`
	StepsMax        int    `json:"steps_max"`
	Priority        int    `json:"priority"`
	Owner           string `json:"owner"`
	LeaseUntil      string `json:"lease_until"`
	HeartbeatAt     string `json:"heartbeat_at"`
	CancelRequested bool   `json:"cancel_requested"`
	CancelledBy     string `json:"cancelled_by"`
	ApprovedBy      string `json:"approved_by"`
	ApprovalGate    string `json:"approval_gate"`
	ApprovalVersion int64  `json:"approval_version"`
	ScheduleID      string `json:"schedule_id,omitempty"`
	ScheduleRun     int64  `json:"schedule_run,omitempty"`
	LastError       string `json:"last_error"`
	RunAt           string `json:"run_at"`
	Deadline        string `json:"deadline"`
	CreatedAt       string `json:"created_at"`
	UpdatedAt       string `json:"updated_at"`
}

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// stampLayout is RFC 3339 UTC with exactly three fractional digits: the
// stored precision, at a fixed width so that columns of times line up.
const stampLayout = "2006-01-02T15:04:05.000Z07:00"

// stamp is t as the human-readable outputs print it (stampLayout); "-"
// for the zero time.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(stampLayout)
}

func recordOf(t model.Task) taskRecord {
	return taskRecord{ID: t.ID, User: t.User, Key: t.Key, State: string(t.State), Reason: string(t.Reason),
		Version: t.Version, Attempt: t.Attempt, AttemptsCharged: t.AttemptsCharged, AttemptsMax: t.AttemptsMax,
		AttemptsFailed: t.AttemptsFailed, CostUsed: t.CostUsed, CostBudget: t.CostBudget, StepsUsed: t.StepsUsed, StepsMax: t.StepsMax,
		Priority: t.Priority, Owner: t.Owner, LeaseUntil: rfc3339(t.LeaseUntil), HeartbeatAt: rfc3339(t.HeartbeatAt),
		CancelRequested: t.CancelRequested, CancelledBy: t.CancelledBy, ApprovedBy: t.ApprovedBy,
		ApprovalGate: t.ApprovalGate, ApprovalVersion: t.ApprovalVersion, ScheduleID: t.ScheduleID,
		ScheduleRun: t.ScheduleRun, LastError: t.LastError, RunAt: rfc3339(t.RunAt), Deadline: rfc3339(t.Deadline),
		CreatedAt: rfc3339(t.CreatedAt), UpdatedAt: rfc3339(t.UpdatedAt)}
}

// eventRecord is an audit event as --json prints it.
type eventRecord struct {
	Seq     int64  `json:"seq"`
	TaskID  string `json:"task_id"`
	Kind    string `json:"kind"`
	Attempt int    `json:"attempt"`
	Fence   int64  `json:"fence"`
	OpID    string `json:"op_id"`
	From    string `json:"from"`
	To      string `json:"to"`
	Reason  string `json:"reason"`
	Actor   string `json:"actor"`
	At      string `json:"at"`
	Detail  string `json:"detail"`
	Scope   string `json:"scope"`
}

func eventRecordOf(e model.Event) eventRecord {
	return eventRecord{Seq: e.Seq, TaskID: e.TaskID, Kind: string(e.Kind), Attempt: e.Attempt, Fence: e.Fence,
		OpID: e.OpID, From: string(e.From), To: string(e.To), Reason: string(e.Reason), Actor: e.Actor,
		At: rfc3339(e.At), Detail: e.Detail, Scope: e.Scope}
}

// recordsOf maps each of xs to its wire record, in order. The result is
// never nil, so an empty list encodes as [], not null.
func recordsOf[T, R any](xs []T, of func(T) R) []R {
	out := make([]R, 0, len(xs))
	for _, x := range xs {
		out = append(out, of(x))
	}
	return out
}

// limitsView is the stored limits and the per-user overrides, as `limits
// --json` prints them and GET /v1/limits returns them.
func limitsView(limits model.Limits, users []model.UserLimit) map[string]any {
	return map[string]any{"limits": limitsRecord(limits),
		"users": recordsOf(users, func(u model.UserLimit) userLimitRecord { return userLimitRecord(u) })}
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// printStatus prints what a caller needs to know about a task.
func printStatus(w io.Writer, t model.Task) {
	reason := string(t.Reason)
	if reason == "" {
		reason = "-"
	}
	fmt.Fprintf(w, "task %s (user %s, key %s)\n", t.ID, t.User, t.Key)
	fmt.Fprintf(w, "  state     %s (reason %s)\n", t.State, reason)
	fmt.Fprintf(w, "  version   %d (attempt %d; %d of %d attempts charged)\n", t.Version, t.Attempt, t.AttemptsCharged, t.AttemptsMax)
	fmt.Fprintf(w, "  budget    %d of %d spent; %d of %d steps\n", t.CostUsed, t.CostBudget, t.StepsUsed, t.StepsMax)
	if t.Owner != "" {
		fmt.Fprintf(w, "  claim     held by %s until %s (last heartbeat %s)\n", t.Owner, stamp(t.LeaseUntil), stamp(t.HeartbeatAt))
	}
	if t.CancelRequested || t.CancelledBy != "" {
		fmt.Fprintf(w, "  cancel    requested=%t by %s\n", t.CancelRequested, t.CancelledBy)
	}
	if t.State == model.WaitingForApproval {
		fmt.Fprintf(w, "  approval  waiting at gate %s; approve naming version %d\n", t.ApprovalGate, t.ApprovalVersion)
	}
	if t.ApprovedBy != "" {
		fmt.Fprintf(w, "  approved  by %s\n", t.ApprovedBy)
	}
	if t.LastError != "" {
		fmt.Fprintf(w, "  error     %s\n", t.LastError)
	}
	fmt.Fprintf(w, "  times     created %s, updated %s, run at %s", stamp(t.CreatedAt), stamp(t.UpdatedAt), stamp(t.RunAt))
	if !t.Deadline.IsZero() {
		fmt.Fprintf(w, ", deadline %s", stamp(t.Deadline))
	}
	fmt.Fprintln(w)
}

// printTable prints tasks one per line.
func printTable(w io.Writer, tasks []model.Task) {
	fmt.Fprintf(w, "%-20s %-8s %-21s %-20s %4s %9s %7s %s\n", "ID", "USER", "STATE", "REASON", "VER", "COST", "STEPS", "OWNER")
	for _, t := range tasks {
		fmt.Fprintf(w, "%-20s %-8s %-21s %-20s %4d %4d/%-4d %3d/%-3d %s\n", t.ID, truncate(t.User, 8), t.State,
			dash(string(t.Reason)), t.Version, t.CostUsed, t.CostBudget, t.StepsUsed, t.StepsMax, dash(t.Owner))
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "~"
}

// printEvents prints audit events one per line.
func printEvents(w io.Writer, events []model.Event) {
	for _, e := range events {
		var parts []string
		if e.TaskID != "" {
			parts = append(parts, "task="+e.TaskID, fmt.Sprintf("attempt=%d fence=%d", e.Attempt, e.Fence))
		}
		if e.OpID != "" {
			parts = append(parts, "op="+e.OpID)
		}
		if e.From != e.To {
			from := string(e.From)
			if from == "" {
				from = "new"
			}
			parts = append(parts, fmt.Sprintf("%s->%s", from, e.To))
		}
		if e.Reason != "" {
			parts = append(parts, "reason="+string(e.Reason))
		}
		parts = append(parts, "actor="+e.Actor)
		if e.Scope != "" {
			parts = append(parts, "scope="+e.Scope)
		}
		if e.Detail != "" {
			parts = append(parts, fmt.Sprintf("(%s)", e.Detail))
		}
		fmt.Fprintf(w, "%6d %s %-17s %s\n", e.Seq, stamp(e.At), e.Kind, strings.Join(parts, " "))
	}
}

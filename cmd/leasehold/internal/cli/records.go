package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/view"
	"github.com/leasehold/leasehold/model"
)

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
	fmt.Fprintf(w, "task %s (user %s, key %s, kind %s)\n", t.ID, t.User, t.Key, t.Kind)
	fmt.Fprintf(w, "  state     %s (reason %s)\n", t.State, reason)
	fmt.Fprintf(w, "  version   %d (attempt %d; %d of %d attempts charged)\n", t.Version, t.Attempt, t.AttemptsCharged, t.AttemptsMax)
	fmt.Fprintf(w, "  budget    %d of %d spent; %d of %d steps\n", t.CostUsed, t.CostBudget, t.StepsUsed, t.StepsMax)
	if t.Owner != "" {
		fmt.Fprintf(w, "  claim     held by %s until %s (last heartbeat %s)\n", t.Owner, stamp(t.LeaseUntil), stamp(t.HeartbeatAt))
	}
	if note := view.CancelNote(t); note != "" {
		fmt.Fprintf(w, "  cancel    %s\n", note)
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
	if r := t.Result(); r != "" {
		fmt.Fprintf(w, "  result    %s\n", model.Quote(r, 256))
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

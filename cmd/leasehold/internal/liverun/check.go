package liverun

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/worker"
	"github.com/leasehold/leasehold/worker/workertest"
)

// steps counts the steps of a scenario task's payload.
func steps(t scenarios.Task) int {
	var p struct {
		Steps []json.RawMessage `json:"steps"`
	}
	if json.Unmarshal([]byte(t.Request.Payload), &p) != nil {
		return 0
	}
	return len(p.Steps)
}

// settle waits for every task to end, checks each scenario task against
// what the scenario expects, and plays what only the end shows.
func (r *run) settle() error {
	names := make([]string, 0, len(r.ids))
	for name := range r.ids {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if _, err := r.waitState(name, ended...); err != nil {
			return err
		}
	}
	r.moment(Moment{Kind: AllEnded})
	for _, t := range r.sc.Tasks {
		if err := r.checkExpect(t); err != nil {
			return err
		}
	}
	if err := r.checkLimits(); err != nil {
		return err
	}
	return r.storyCompleteTwice()
}

// record reads a task's final record from the database, for the checks.
func (r *run) record(name string) (model.Task, error) {
	return r.q.Task(r.ctx, r.ids[name])
}

// trail reads a task's audit events from the database, for the checks.
func (r *run) trail(name string) ([]model.Event, error) {
	return r.q.Events(r.ctx, r.ids[name])
}

// checkExpect compares a scenario task's end with its Expect (or one of
// its Also), from its record in the database. Effects are checked against
// the service ledger in finish.
func (r *run) checkExpect(t scenarios.Task) error {
	got, err := r.record(t.Name)
	if err != nil {
		return fmt.Errorf("read %s: %w", t.Name, err)
	}
	events, err := r.trail(t.Name)
	if err != nil {
		return fmt.Errorf("read %s's events: %w", t.Name, err)
	}
	retried := false
	for _, ev := range events {
		retried = retried || ev.Kind == model.EventRetry || ev.Kind == model.EventLeaseExpired
	}
	pass := false
	var want []string
	for _, e := range append([]scenarios.Expect{t.Expect}, t.Also...) {
		want = append(want, describe(e))
		pass = pass || (got.State == e.State && (e.Reason == "" || got.Reason == e.Reason) &&
			(e.CancelledBy == "" || got.CancelledBy == e.CancelledBy) && (e.ApprovedBy == "" || got.ApprovedBy == e.ApprovedBy) &&
			(!e.Retried || retried))
	}
	observed := fmt.Sprintf("%s / %s", got.State, dash(string(got.Reason)))
	if got.CancelledBy != "" {
		observed += ", cancelled_by " + got.CancelledBy
	}
	if got.ApprovedBy != "" {
		observed += ", approved_by " + got.ApprovedBy
	}
	if t.Expect.Retried {
		observed += fmt.Sprintf(", retried=%t", retried)
	}
	r.outcome(StoryExpect, t.Name, "portfolio: "+t.Name, strings.Join(want, ", or "), observed, pass)
	return nil
}

func describe(e scenarios.Expect) string {
	s := string(e.State)
	if e.Reason != "" {
		s += " / " + string(e.Reason)
	}
	if e.CancelledBy != "" {
		s += ", cancelled_by " + e.CancelledBy
	}
	if e.ApprovedBy != "" {
		s += ", approved_by " + e.ApprovedBy
	}
	if e.Retried {
		s += ", after a retry"
	}
	return s
}

// span is an interval during which a task was running.
type span struct{ from, to time.Time }

// runSpans returns the intervals during which the task was running, from
// its audit events.
func runSpans(events []model.Event) []span {
	var out []span
	var start time.Time
	running := false
	for _, ev := range events {
		switch {
		case ev.To == model.Running && ev.From != model.Running:
			start, running = ev.At, true
		case ev.From == model.Running && ev.To != model.Running && running:
			out = append(out, span{start, ev.At})
			running = false
		}
	}
	return out
}

// overlap reports whether any span of a overlaps any span of b.
func overlap(a, b []span) bool {
	for _, p := range a {
		for _, q := range b {
			if p.from.Before(q.to) && q.from.Before(p.to) {
				return true
			}
		}
	}
	return false
}

// checkLimits checks, for each user the scenario limits to one running
// task, that no two of the user's tasks ran at once.
func (r *run) checkLimits() error {
	for _, u := range r.sc.UserLimits {
		if u.RunningMax != 1 {
			continue
		}
		var names []string
		spans := map[string][]span{}
		for _, t := range r.sc.Tasks {
			if t.Request.User != u.User {
				continue
			}
			events, err := r.trail(t.Name)
			if err != nil {
				return fmt.Errorf("read %s's events: %w", t.Name, err)
			}
			names = append(names, t.Name)
			spans[t.Name] = runSpans(events)
		}
		overlapped, ran := false, len(names) > 1
		for i, a := range names {
			ran = ran && len(spans[a]) > 0
			for _, b := range names[i+1:] {
				overlapped = overlapped || overlap(spans[a], spans[b])
			}
		}
		r.outcome(StoryUserLimit, "", fmt.Sprintf("per-user limit of 1 (%s's %d tasks)", u.User, len(names)), "never running at once",
			fmt.Sprintf("%d tasks ran; overlap=%t", len(names), overlapped), ran && !overlapped)
	}
	return nil
}

// finish reads the final state back into the result and checks the
// external service's ledger.
func (r *run) finish() {
	names := make([]string, 0, len(r.ids))
	for name := range r.ids {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if t, err := r.record(name); err == nil {
			r.res.Tasks = append(r.res.Tasks, TaskOf(name, t))
		}
	}
	if events, err := r.q.Events(r.ctx, ""); err == nil {
		r.res.Events = events
	}
	if m, err := r.q.Metrics(r.ctx); err == nil {
		r.res.Metrics = m
	}
	r.checkLedger()
}

// checkLedger reads the external service's ledger: no operation applied
// twice, each scenario task's effects as expected, and the over-budget
// charge never applied.
func (r *run) checkLedger() {
	const name, expected = "no customer-visible action repeated", "every operation applied at most once (service ledger)"
	svc, err := workertest.OpenLedger(filepath.Join(r.cfg.Dir, "service.db"), worker.Fenced, clockwork.NewRealClock())
	if err != nil {
		r.outcome(StoryNoRepeat, "", name, expected, err.Error(), false)
		return
	}
	defer svc.Close()
	applied, err := svc.Applications()
	if err != nil {
		r.outcome(StoryNoRepeat, "", name, expected, err.Error(), false)
		return
	}
	r.res.Applied = applied
	twice := []string{}
	for op, n := range applied {
		if n > 1 {
			twice = append(twice, op)
		}
	}
	sort.Strings(twice)
	r.outcome(StoryNoRepeat, "", name, expected,
		fmt.Sprintf("%d operations applied, repeated: %v", len(applied), twice), len(twice) == 0 && len(applied) > 0)
	for _, t := range r.sc.Tasks {
		if t.EffectStep < 0 || t.Expect.EffectsApplied == scenarios.AnyEffects || r.ids[t.Name] == "" {
			continue
		}
		op := model.OperationID(r.ids[t.Name], t.EffectStep)
		if t.Expect.EffectsApplied == 0 {
			r.outcome(StoryOverBudget, t.Name, "over-budget effect never made",
				fmt.Sprintf("the %s task's effect (step %d) is not in the ledger", t.Name, t.EffectStep),
				fmt.Sprintf("%s applied %d times", op, applied[op]), applied[op] == 0)
			continue
		}
		r.outcome(StoryExpect, t.Name, "portfolio: "+t.Name+"'s effect",
			fmt.Sprintf("applied exactly %d time(s) by the service", t.Expect.EffectsApplied),
			fmt.Sprintf("%s applied %d times", op, applied[op]), applied[op] == t.Expect.EffectsApplied)
	}
}

// Print writes the run's tasks and outcome table.
func Print(w io.Writer, res Result, path string) {
	fmt.Fprintln(w, "\ntasks:")
	fmt.Fprintf(w, "  %-10s %-22s %-21s %-20s %4s %9s %7s\n", "NAME", "ID", "STATE", "REASON", "VER", "COST", "STEPS")
	for _, t := range res.Tasks {
		fmt.Fprintf(w, "  %-10s %-22s %-21s %-20s %4d %4d/%-4d %3d/%-3d\n", t.Name, t.ID, t.State, dash(t.Reason), t.Version,
			t.CostUsed, t.CostBudget, t.StepsUsed, t.StepsMax)
	}
	if len(res.NotLive) > 0 {
		fmt.Fprintln(w, "\nnot played live:")
		for _, s := range res.NotLive {
			fmt.Fprintln(w, "  "+s)
		}
	}
	if store := res.Settings["store"]; store != "" {
		fmt.Fprintf(w, "\nstore: %s\n", store)
	}
	fmt.Fprintf(w, "\noutcomes (live: %s over real processes and the wall clock, durations x%d):\n", res.Scenario, DurationScale)
	for _, o := range res.Outcomes {
		mark := "PASS"
		if !o.Pass {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  %s %-58s %s\n", mark, o.Name, o.Observed)
	}
	verdict := "passed"
	if !res.Pass {
		verdict = "FAILED"
	}
	fmt.Fprintf(w, "\ndemo %s in %.1fs; results in %s\n", verdict, float64(res.DurationMs)/1000, path)
}

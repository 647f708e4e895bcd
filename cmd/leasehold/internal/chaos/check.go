package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"time"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/worker/workertest"
)

// detailsMax bounds the violations a finding names.
const detailsMax = 20

// evidence is what one lane left behind, read after the drain: the tasks,
// their trails and effects from the database, the operations the service's
// own ledger applied, and the task IDs the caller was told were accepted.
type evidence struct {
	Workers  []string
	Accepted []string
	Tasks    []model.Task
	Events   []model.Event
	Effects  []model.Effect
	Applied  map[string]int // operation ID -> applications, from the ledger
}

// judge finds every violation in a lane's evidence. The porcupine verdict
// and the integrity check are left to the caller, which runs them.
func judge(ev evidence) Findings {
	var f Findings
	note := func(format string, args ...any) {
		if len(f.Details) < detailsMax {
			f.Details = append(f.Details, fmt.Sprintf(format, args...))
		}
	}
	tasks := map[string]model.Task{}
	for _, t := range ev.Tasks {
		tasks[t.ID] = t
	}
	for _, id := range ev.Accepted {
		t, ok := tasks[id]
		switch {
		case !ok:
			f.Lost++
			note("lost: task %s was accepted and is not in the database", id)
		case !settled(t.State):
			f.Lost++
			note("lost: task %s is %s after the drain", id, t.State)
		}
	}
	intents := map[string]bool{}
	for _, e := range ev.Effects {
		intents[e.OpID] = true
	}
	for _, opID := range sortedKeys(ev.Applied) {
		n := ev.Applied[opID]
		if n > 1 {
			f.Duplicated++
			note("duplicated: the service applied %s %d times", opID, n)
		}
		if !intents[opID] {
			f.Unexpected++
			note("unexpected: the service applied %s, for which no intent was recorded", opID)
		}
	}
	steps := map[string]int{}
	for _, e := range ev.Events {
		if e.Kind == model.EventStep {
			steps[e.TaskID]++
		}
	}
	for _, t := range ev.Tasks {
		if t.CostUsed > t.CostBudget || t.StepsUsed > t.StepsMax || steps[t.ID] > t.StepsMax {
			f.Overspent++
			note("overspent: task %s used cost %d of %d, steps %d of %d (%d step events)", t.ID, t.CostUsed, t.CostBudget,
				t.StepsUsed, t.StepsMax, steps[t.ID])
		}
	}
	// A task that ended for its budget or step limit stopped before the
	// step that would have passed it: no effect of that step or a later
	// one may have been applied.
	for _, e := range ev.Effects {
		t, ok := tasks[e.TaskID]
		limited := t.Reason == model.BudgetExhausted || t.Reason == model.StepsExhausted
		if ok && limited && e.Step >= t.StepsUsed && ev.Applied[e.OpID] > 0 {
			f.Overspent++
			note("overspent: task %s ended %s after %d steps, yet the service applied %s of step %d", t.ID, t.Reason, t.StepsUsed, e.OpID, e.Step)
		}
	}
	for _, bad := range replay(entries(ev.Events, ev.Workers)) {
		e := bad.Event
		f.StaleAccepted++
		note("stale accepted: event %d (%s by %s, fence %d, %s->%s) on task %s does not follow the claim register",
			e.Seq, e.Kind, e.Actor, e.Fence, e.From, e.To, e.TaskID)
	}
	return f
}

// lateCalls counts, by the service's answer, the calls made under a fence
// that a newer claim of the task had already replaced when the call was
// answered (a claim committed in an earlier millisecond).
func lateCalls(calls []workertest.CallRecord, events []model.Event, effects []model.Effect) map[string]int {
	taskOf := map[string]string{}
	for _, e := range effects {
		taskOf[e.OpID] = e.TaskID
	}
	type claim struct {
		fence int64
		at    time.Time
	}
	claims := map[string][]claim{}
	for _, e := range events {
		if e.Kind == model.EventClaimed {
			claims[e.TaskID] = append(claims[e.TaskID], claim{e.Fence, e.At})
		}
	}
	out := map[string]int{}
	for _, c := range calls {
		for _, cl := range claims[taskOf[c.OpID]] {
			if cl.fence > c.Fence && cl.at.Before(c.At) {
				out[string(c.Outcome)]++
				break
			}
		}
	}
	return out
}

// settled reports whether a task has reached a state the drain waits for:
// terminal, or parked for an operator in needs_review.
func settled(s model.State) bool {
	return s.Terminal() || s == model.NeedsReview
}

// entries marks the events that workers wrote under their claims.
func entries(events []model.Event, workers []string) []Entry {
	isWorker := map[string]bool{}
	for _, w := range workers {
		isWorker[w] = true
	}
	out := make([]Entry, len(events))
	for i, e := range events {
		out[i] = Entry{Event: e, Worker: isWorker[e.Actor] && e.Kind != model.EventClaimed && e.Kind != model.EventStaleWrite}
	}
	return out
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// gather reads a lane's evidence from its database through the queue's Go
// API: every task, the whole trail in commit order, every effect.
func gather(ctx context.Context, q *queue.Queue) (tasks []model.Task, events []model.Event, effects []model.Effect, err error) {
	if tasks, err = q.List(ctx, model.ListFilter{Limit: model.ListLimitMax}); err != nil {
		return nil, nil, nil, fmt.Errorf("list the tasks: %w", err)
	}
	if events, err = q.Events(ctx, ""); err != nil {
		return nil, nil, nil, fmt.Errorf("read the event trail: %w", err)
	}
	if effects, err = q.Effects(ctx, ""); err != nil {
		return nil, nil, nil, fmt.Errorf("read the effects ledger: %w", err)
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].Seq < events[j].Seq })
	return tasks, events, effects, nil
}

// integrity runs PRAGMA integrity_check on a SQLite file, read-only, and
// returns its answer ("ok" when the file is sound).
func integrity(ctx context.Context, path string) (string, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		return "", fmt.Errorf("integrity check of %s: %w", path, err)
	}
	defer db.Close()
	var answer string
	if err := db.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&answer); err != nil {
		return "", fmt.Errorf("integrity check of %s: %w", path, err)
	}
	return answer, nil
}

// laneRecord is what the check read from one lane, kept for the page.
type laneRecord struct {
	kind    string
	workers []string
	tasks   []model.Task
	events  []model.Event
}

// check reads every lane back after the drain and records the counts and
// findings in the result.
func (r *run) check(ctx context.Context) error {
	total := Findings{Porcupine: PorcupineOK, Integrity: "ok"}
	r.records = nil
	for _, l := range r.lanes {
		tasks, events, effects, err := gather(ctx, l.q)
		if err != nil {
			return fmt.Errorf("check lane %s: %w", l.kind, err)
		}
		applied, err := l.svc.Applications()
		if err != nil {
			return fmt.Errorf("check lane %s: %w", l.kind, err)
		}
		calls, err := l.svc.Records()
		if err != nil {
			return fmt.Errorf("check lane %s: %w", l.kind, err)
		}
		for outcome, n := range lateCalls(calls, events, effects) {
			r.res.Counts.LateCalls[outcome] += n
		}
		f := judge(evidence{Workers: l.workers(), Accepted: l.acceptedIDs(), Tasks: tasks, Events: events, Effects: effects, Applied: applied})
		f.Porcupine = CheckLinearizable(History(entries(events, l.workers())))
		f.Integrity = "ok"
		for _, path := range []string{l.dbPath, l.ledgerPath} {
			answer, err := integrity(ctx, path)
			if err != nil {
				return err
			}
			if answer != "ok" && f.Integrity == "ok" {
				f.Integrity = answer
				f.Details = append(f.Details, fmt.Sprintf("integrity_check of %s: %s", path, answer))
			}
		}
		lr := Lane{Kind: l.kind, Workers: l.workers(), Tasks: len(tasks), States: map[string]int{}, Applied: len(applied), Findings: f}
		for _, t := range tasks {
			lr.States[string(t.State)]++
			r.res.Counts.States[string(t.State)]++
		}
		for _, e := range events {
			if e.Kind == model.EventStaleWrite {
				r.res.Counts.StaleRefused++
			}
		}
		r.res.Counts.Applied += len(applied)
		r.res.Lanes = append(r.res.Lanes, lr)
		r.records = append(r.records, laneRecord{kind: l.kind, workers: l.workers(), tasks: tasks, events: events})
		total = merge(total, f, l.kind)
	}
	r.res.Findings = total
	return nil
}

// merge adds a lane's findings to the run's.
func merge(total, f Findings, kind string) Findings {
	total.Lost += f.Lost
	total.Duplicated += f.Duplicated
	total.Unexpected += f.Unexpected
	total.StaleAccepted += f.StaleAccepted
	total.Overspent += f.Overspent
	switch {
	case f.Porcupine == PorcupineIllegal:
		total.Porcupine = PorcupineIllegal
	case f.Porcupine == PorcupineUnknown && total.Porcupine == PorcupineOK:
		total.Porcupine = PorcupineUnknown
	}
	if f.Integrity != "ok" && total.Integrity == "ok" {
		total.Integrity = f.Integrity
	}
	for _, d := range f.Details {
		if len(total.Details) < detailsMax {
			total.Details = append(total.Details, kind+": "+d)
		}
	}
	return total
}

package chaos

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/reports"
)

// writePage writes the run as one self-contained HTML page (the reports
// package's), every figure on it labelled live.
func writePage(path string, r *run) error {
	var b bytes.Buffer
	if err := reports.HTML(&b, pageReport(r)); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return reports.WriteFile(path, b.Bytes())
}

// pageReport is the run as a report: its checks, one outcome per lane and
// one timeline per lane, in the live section; the fixture section says it
// holds nothing.
func pageReport(r *run) reports.Report {
	res := r.res
	c, f := res.Counts, res.Findings
	cmd := fmt.Sprintf("leasehold chaos --seed %d --kills %d --stops %d --tasks %d", res.Seed, res.Settings.Kills, res.Settings.Stops, res.Settings.Tasks)
	inputs := fmt.Sprintf("seed %d; %d lanes (%s), %d workers each; %d tasks; %d SIGKILLs (%d aimed before the service applied, %d after it applied, before the receipt), %d SIGSTOPs past the lease (%d inside a call)",
		res.Seed, len(res.Settings.Lanes), strings.Join(res.Settings.Lanes, ", "), res.Settings.WorkersPerLane, c.Tasks, c.Kills, c.AimedBefore, c.AimedAfter, c.Stops, c.StopsAimed)
	result := func(observed string, pass bool) []reports.Result {
		return []reports.Result{{Kind: reports.Live, Inputs: inputs, Observed: observed, Pass: pass, Command: cmd}}
	}
	rep := reports.Report{Title: "leasehold chaos: the kill storm", Generated: time.Now().UTC().Format(time.RFC3339),
		Pass: res.Pass, Versions: r.cfg.Versions, Pragmas: res.Pragmas,
		Checks: []reports.Check{
			{ID: "lost", Title: "No accepted task is lost", Results: result(fmt.Sprintf("%d lost of %d accepted; final states %s", f.Lost, c.Tasks, states(c.States)), f.Lost == 0)},
			{ID: "duplicated", Title: "No operation applied twice (the service's own ledger)", Results: result(fmt.Sprintf("%d duplicated of %d applied", f.Duplicated, c.Applied), f.Duplicated == 0)},
			{ID: "unexpected", Title: "No application without a recorded intent", Results: result(fmt.Sprintf("%d unexpected", f.Unexpected), f.Unexpected == 0)},
			{ID: "stale", Title: "No stale write accepted", Results: result(fmt.Sprintf("%d accepted; %d refused as stale; late service calls (under a fence a newer claim had replaced): %s", f.StaleAccepted, c.StaleRefused, states(c.LateCalls)), f.StaleAccepted == 0)},
			{ID: "overspent", Title: "No budget or step limit overspent", Results: result(fmt.Sprintf("%d tasks overspent", f.Overspent), f.Overspent == 0)},
			{ID: "integrity", Title: "PRAGMA integrity_check of every database and ledger", Results: result(f.Integrity, f.Integrity == "ok")},
			{ID: "linearizable", Title: "Every task's claims and fenced writes are linearizable (porcupine)", Results: result("porcupine: "+f.Porcupine, f.Porcupine == PorcupineOK)},
			{ID: "plan", Title: "The attacks ran as configured", Results: result(fmt.Sprintf("kills %d of %d, stops %d of %d, tasks %d of %d%s", c.Kills, res.Settings.Kills,
				c.Stops, res.Settings.Stops, c.Tasks, res.Settings.Tasks, orNone(res.Failure)), res.Failure == "" && c.Kills == res.Settings.Kills && c.Stops == res.Settings.Stops && c.Tasks == res.Settings.Tasks)},
		},
		Fixture: reports.Section{Kind: reports.Fixture, About: []string{"None: every figure of this page is live. The simulator's fixture results are in make evidence."}},
		Live: reports.Section{Kind: reports.Live, About: []string{
			fmt.Sprintf("Live: real leasehold worker processes on %s (%s/%s, %s CPUs, %s), the wall clock; started %s, took %d ms (attacks %d, drain %d, check %d).",
				res.Machine["hostname"], res.Machine["goos"], res.Machine["goarch"], res.Machine["cpus"], res.Machine["go"], res.Started,
				res.Durations.Total, res.Durations.Attack, res.Durations.Drain, res.Durations.Check),
			fmt.Sprintf("Each lane is a SQLite file (WAL, synchronous=FULL), a service ledger of one kind and its workers; lease %d ms, heartbeat %d ms, %d attempts.",
				res.Settings.LeaseMs, res.Settings.HeartbeatMs, res.Settings.AttemptsMax),
			"Findings come from the databases (tasks, the event trail, the effects ledger), the service's own ledger and PRAGMA integrity_check, read after the drain; the linearizability check runs porcupine over every task's claim register built from the event trail.",
			fmt.Sprintf("The caller acted through the queue's Go API: %d cancellations, %d approvals, %d rejections.", c.Cancels, c.Approvals, c.Rejections),
		}},
		Commands: []reports.Command{{What: "this run's plan again (the timing of real processes differs)", Command: cmd},
			{What: "the kill storm with a fresh seed", Command: "make chaos"}},
	}
	for _, l := range res.Lanes {
		rep.Live.Outcomes = append(rep.Live.Outcomes, reports.Outcome{Name: "lane " + l.Kind,
			Expected: "every task settled; nothing lost, duplicated, unexpected, stale or overspent; linearizable; integrity ok",
			Observed: fmt.Sprintf("%d tasks: %s; %d operations applied; porcupine %s; integrity %s%s", l.Tasks, states(l.States), l.Applied,
				l.Findings.Porcupine, l.Findings.Integrity, details(l.Findings)),
			Pass: l.Findings.Clean(), AtMs: res.Durations.Total})
	}
	for _, lr := range r.records {
		rep.Live.Timelines = append(rep.Live.Timelines, laneTimeline(r, lr))
	}
	return rep
}

func orNone(failure string) string {
	if failure == "" {
		return ""
	}
	return "; " + failure
}

func states(m map[string]int) string {
	keys := sortedKeys(m)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

func details(f Findings) string {
	if len(f.Details) == 0 {
		return ""
	}
	return "; " + strings.Join(f.Details, "; ")
}

// laneTimeline draws one lane: a lane per worker with its claims as bars,
// refused writes and lease expiries marked, every kill and restart marked
// on its worker, stops shaded on the stopped worker and lock holds shaded
// across the lane.
func laneTimeline(r *run, lr laneRecord) reports.Timeline {
	t := reports.Timeline{Title: "lane " + lr.kind + ": kills, stops and recoveries", Kind: reports.Live, Unit: "wall ms", Lanes: lr.workers}
	end := r.res.Durations.Total
	at := func(ts time.Time) int64 { return min(max(0, ts.Sub(r.start).Milliseconds()), end) }
	open := map[string]*reports.Bar{}
	for _, e := range lr.events {
		x := at(e.At)
		detail := fmt.Sprintf("task %s attempt %d fence %d", e.TaskID, e.Attempt, e.Fence)
		key := fmt.Sprintf("%s/%d", e.TaskID, e.Fence)
		switch {
		case e.Kind == model.EventClaimed:
			open[key] = &reports.Bar{Lane: e.Actor, Start: x, TaskID: e.TaskID, Attempt: e.Attempt, Fence: e.Fence,
				Label: fmt.Sprintf("%s f%d", short(e.TaskID), e.Fence), Detail: detail + " claimed by " + e.Actor}
		case e.From == model.Running && e.To != model.Running:
			lane := e.Actor
			if b, ok := open[key]; ok {
				b.End, b.Detail, lane = x, b.Detail+"; ended: "+string(e.Kind), b.Lane
				t.Bars = append(t.Bars, *b)
				delete(open, key)
			}
			if e.Kind == model.EventLeaseExpired {
				t.Marks = append(t.Marks, reports.Mark{Lane: lane, At: x, Kind: reports.MarkExpiry, Label: "expired", Detail: detail, TaskID: e.TaskID})
			}
		case e.Kind == model.EventStaleWrite:
			t.Marks = append(t.Marks, reports.Mark{Lane: e.Actor, At: x, Kind: reports.MarkStale, Label: "refused", Detail: detail + ": " + e.Detail, TaskID: e.TaskID})
		}
	}
	for _, b := range open {
		b.End = end
		t.Bars = append(t.Bars, *b)
	}
	sort.SliceStable(t.Bars, func(i, j int) bool { return t.Bars[i].Start < t.Bars[j].Start })
	stoppedAt := map[string]int64{}
	holdAt := int64(-1)
	for _, m := range r.res.Timeline {
		if m.Lane != lr.kind {
			continue
		}
		switch m.Kind {
		case MomentKill, MomentAimed, MomentStart:
			label := map[string]string{MomentKill: "SIGKILL", MomentAimed: "aimed SIGKILL", MomentStart: "start"}[m.Kind]
			t.Marks = append(t.Marks, reports.Mark{Lane: m.Worker, At: min(m.AtMs, end), Kind: reports.MarkFault, Label: label, Detail: m.Detail})
		case MomentStop:
			stoppedAt[m.Worker] = m.AtMs
		case MomentCont:
			if from, ok := stoppedAt[m.Worker]; ok {
				t.Shades = append(t.Shades, reports.Shade{Start: from, End: min(m.AtMs, end), Label: "SIGSTOP", Lane: m.Worker})
				delete(stoppedAt, m.Worker)
			}
		case MomentHold:
			if holdAt < 0 {
				holdAt = m.AtMs
			}
		case MomentRelease, MomentMiss:
			if holdAt >= 0 {
				t.Shades = append(t.Shades, reports.Shade{Start: holdAt, End: min(m.AtMs, end), Label: "lock held to aim a kill"})
				holdAt = -1
			}
		}
	}
	t.End = end
	t.Caption = "Live, wall-clock milliseconds since the run started; claims from the event trail, signals from the run's own record."
	return t
}

func short(id string) string {
	id = strings.TrimPrefix(id, model.TaskIDPrefix)
	if len(id) > 6 {
		return id[:6]
	}
	return id
}

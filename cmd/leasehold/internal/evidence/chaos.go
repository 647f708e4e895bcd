package evidence

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/chaos"
	"github.com/leasehold/leasehold/reports"
)

// AddChaos adds the chaos run's figures to the evidence as live results,
// from its result (the record package chaos defines, read from path).
func AddChaos(r *reports.Report, res chaos.Result, path string) error {
	c, f, s := res.Counts, res.Findings, res.Settings
	inputs := fmt.Sprintf("make chaos, seed %d on %s: %d tasks over %d lanes (%s), %d SIGKILLs (%d aimed between intent and receipt: %d before the service applied, %d after), %d SIGSTOPs past the lease; %d ms",
		res.Seed, res.Machine["hostname"], c.Tasks, len(s.Lanes), strings.Join(s.Lanes, ", "), c.Kills, c.AimedBefore+c.AimedAfter, c.AimedBefore, c.AimedAfter, c.Stops, res.Durations.Total)
	cmd := fmt.Sprintf("make chaos SEED=%d", res.Seed)
	result := func(observed string, pass bool) reports.Result {
		return reports.Result{Kind: reports.Live, Inputs: inputs, Observed: observed, Pass: pass, Command: cmd}
	}
	planned := res.Failure == "" && c.Kills == s.Kills && c.Stops == s.Stops && c.Tasks == s.Tasks
	check := reports.Check{ID: "chaos", Title: "The kill storm: nothing lost, applied twice or accepted stale", Results: []reports.Result{
		result(fmt.Sprintf("%d of %d kills, %d of %d stops, %d of %d tasks%s", c.Kills, s.Kills, c.Stops, s.Stops, c.Tasks, s.Tasks, map[bool]string{true: "", false: "; " + res.Failure}[res.Failure == ""]), planned),
		result(fmt.Sprintf("%d lost; final states %v", f.Lost, c.States), f.Lost == 0),
		result(fmt.Sprintf("%d duplicated and %d unexpected of %d operations applied (the service's own ledger)", f.Duplicated, f.Unexpected, c.Applied), f.Duplicated == 0 && f.Unexpected == 0),
		result(fmt.Sprintf("%d stale writes accepted, %d refused; late service calls %s; porcupine: %s", f.StaleAccepted, c.StaleRefused, LateCalls(c.LateCalls), f.Porcupine), f.StaleAccepted == 0 && f.Porcupine == chaos.PorcupineOK),
		result(fmt.Sprintf("%d overspent; integrity_check %s", f.Overspent, f.Integrity), f.Overspent == 0 && f.Integrity == "ok"),
	}}
	r.Checks = append(r.Checks, check)
	r.Live.About = append(r.Live.About, fmt.Sprintf("The kill storm (make chaos, seed %d, started %s): real worker processes over one SQLite file per service kind, checked from the databases, the service's ledger and the event trail after the drain; its own page is %s.",
		res.Seed, res.Started, filepath.Join(filepath.Dir(path), "index.html")))
	r.Commands = append(r.Commands, reports.Command{What: "the kill storm and its checker", Command: cmd})
	r.Pass = r.Pass && check.Pass()
	return r.Validate()
}

// LateCalls renders the late calls by the service's answer.
func LateCalls(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

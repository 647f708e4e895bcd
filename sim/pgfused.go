package sim

import (
	"fmt"
	"slices"

	"github.com/leasehold/leasehold/faults"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/scenarios"
)

// The statements PostgreSQL runs as their own transactions, fused: a lone
// submit (submit_one) and a group of completions with their claims
// (complete_and_claim), named as the queue marks them for the layers
// below database/sql (sqlconn.OwnTransaction). A storage fault that lands
// on one (faults.Storage.StatementCounts) is recorded at the statement,
// as a fault cell "fault@statement", besides where the world's operation
// recorded it.
const (
	StatementSubmitOne        = "submit_one"
	StatementCompleteAndClaim = "complete_and_claim"
)

// FusedStatements lists the fused statements a fault cell may name.
func FusedStatements() []string {
	return []string{StatementSubmitOne, StatementCompleteAndClaim}
}

// FusedFaultKinds are the faults that land on a fused statement, as the
// storage faults make them on PostgreSQL (storagefault's runOwn), each
// with what the queue tells its caller:
//
//   - at its implicit BEGIN, the statement unrun: the connection lost
//     (fail_begin: ErrOutcomeUnknown, as any lost connection), a lock
//     not available (busy: ErrNotApplied), the server down (unavailable:
//     refused at the connection's open or ended at BEGIN);
//   - in the middle of it: the connection lost, the statement rolled back
//     on the server (fail_statement: ErrOutcomeUnknown, not applied);
//   - at its COMMIT: refused, the statement rolled back (fail_commit:
//     ErrNotApplied, which the queue runs again as a conflict), or
//     applied and reported failed (ambiguous_commit: ErrOutcomeUnknown,
//     applied).
func FusedFaultKinds() []string {
	return []string{string(faults.FailBegin), string(faults.Busy), FaultUnavailable,
		string(faults.FailStatement), string(faults.FailCommit), string(faults.AmbiguousCommit)}
}

// fusedCounts is what the fused statements had been hit by.
type fusedCounts [2]faults.StorageCounts

// fusedHits reads how many faults have hit each fused statement.
func (w *World) fusedHits() fusedCounts {
	var out fusedCounts
	for i, name := range FusedStatements() {
		out[i] = w.storage.StatementCounts(name)
	}
	return out
}

// coverFused records a fault cell for each fault that hit a fused
// statement since before.
func (w *World) coverFused(before fusedCounts) {
	after := w.fusedHits()
	for i, name := range FusedStatements() {
		if after[i] == before[i] {
			continue
		}
		if after[i].Unavailable > before[i].Unavailable {
			w.cover.fault(FaultUnavailable, name)
		}
		for _, f := range faults.StorageFaults() {
			if after[i].Fired(f) > before[i].Fired(f) {
				w.cover.fault(string(f), name)
			}
		}
	}
}

// fusedDeclared is the cells of fused statements a scenario's sweep on
// PostgreSQL must reach, by scenario: the lone submit (submit_one) under
// the fault kinds (FusedFaultKinds) its 500-seed sweep on PostgreSQL
// reached in at least 20 seeds, so that any sweep of 200 seeds, which
// checks the declared cells, expects to reach each 8 times and misses one
// less often than once in 2,000 sweeps (docs/PERF.md, "PostgreSQL fused:
// 500 seeds of every scenario", has the counts). A scenario whose submits rarely meet a
// storage fault declares fewer kinds (periodic: ambiguous_commit alone
// reaches 20) or none (late-result: 1 to 12 seeds of 500 a kind).
//
// complete_and_claim runs only for a group of two or more completions
// (queue/fused.go), which the world's chasing group events form (the
// broken variant fused-completion-unfenced is caught at portfolio seed
// 2), but no storage fault landed on one in 100 portfolio seeds on
// PostgreSQL (docs/PERF.md): its cells are recorded when reached, none
// declared. A claim runs claim_batch inside its own transaction, not as
// a statement of its own: faults land on the claim's BEGIN, statement
// and COMMIT, the claim's cells ("fault kind@claim").
var fusedDeclared = map[string][]fusedCell{
	"boundaries":     {{StatementSubmitOne, FusedFaultKinds()}},
	"crash-storm":    {{StatementSubmitOne, FusedFaultKinds()}},
	"deadline":       {{StatementSubmitOne, FusedFaultKinds()}},
	"long-running":   {{StatementSubmitOne, FusedFaultKinds()}},
	"periodic":       {{StatementSubmitOne, []string{string(faults.AmbiguousCommit)}}},
	"portfolio":      {{StatementSubmitOne, FusedFaultKinds()}},
	"quota":          {{StatementSubmitOne, FusedFaultKinds()}},
	"storage-outage": {{StatementSubmitOne, FusedFaultKinds()}},
}

// fusedCell is a fused statement under the fault kinds a scenario
// declares for it.
type fusedCell struct {
	statement string
	kinds     []string
}

// cells returns the fault cells of c's statement under each of its kinds.
func (c fusedCell) cells() []scenarios.Cell {
	var out []scenarios.Cell
	for _, kind := range c.kinds {
		out = append(out, scenarios.FaultCell(kind, c.statement))
	}
	return out
}

// Declared returns sc with the cells the store adds to its declared ones:
// on PostgreSQL, its fused statements under the fault kinds fusedDeclared
// names; none on SQLite, which fuses nothing.
func (s Store) Declared(sc scenarios.Scenario) scenarios.Scenario {
	if s.pg == nil {
		return sc
	}
	var add []scenarios.Cell
	for _, fc := range fusedDeclared[sc.Name] {
		for _, cell := range fc.cells() {
			if !slices.Contains(sc.Covers, cell) {
				add = append(add, cell)
			}
		}
	}
	if len(add) > 0 {
		sc.Covers = append(slices.Clip(sc.Covers), add...)
	}
	return sc
}

// fusedFaults is how many faults landed on a fused statement in the run.
func (w *World) fusedFaults() int {
	n := 0
	for _, c := range w.fusedHits() {
		n += c.Total()
	}
	return n
}

// outcomes lists how every task the queue holds ended, as "ID state
// reason" lines in ID order: what the same seed on another store must end
// with when no fault landed on a statement only one of them runs.
func (w *World) outcomes() []string {
	var tasks []model.Task
	var err error
	w.storage.Bypass(func() { tasks, err = w.q.List(w.ctx, model.ListFilter{Limit: model.ListLimitMax}) })
	if err != nil {
		return []string{"tasks unreadable: " + err.Error()}
	}
	out := make([]string, 0, len(tasks))
	for _, t := range tasks {
		out = append(out, fmt.Sprintf("%s %s %s", t.ID, t.State, t.Reason))
	}
	slices.Sort(out)
	return out
}

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

// FusedFaultKinds are the faults of a fused statement the protocol tells
// apart, as the storage faults that make them on PostgreSQL: the statement
// fails and is rolled back (fail_commit: its COMMIT refused, ErrNotApplied,
// which the queue runs again as a conflict), its COMMIT is applied and
// reported failed (ambiguous_commit: ErrOutcomeUnknown, applied), and the
// connection is lost in the middle of it (fail_statement:
// ErrOutcomeUnknown, not applied).
func FusedFaultKinds() []string {
	return []string{string(faults.FailCommit), string(faults.AmbiguousCommit), string(faults.FailStatement)}
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
// PostgreSQL must reach, by scenario: the lone submit under each fault
// kind the protocol tells apart (FusedFaultKinds), in the scenarios whose
// 500-seed sweeps on PostgreSQL reached each (the least, fail_statement:
// boundaries 33 seeds, crash-storm 29, deadline 22, late-result 7,
// portfolio 45).
//
// complete_and_claim runs only for a group of two or more completions,
// which the world does not yet form (it steps one write at a time); its
// cells are recorded when reached and declared once the world commits
// groups.
var fusedDeclared = map[string][]string{
	"boundaries":  {StatementSubmitOne},
	"crash-storm": {StatementSubmitOne},
	"deadline":    {StatementSubmitOne},
	"late-result": {StatementSubmitOne},
	"portfolio":   {StatementSubmitOne},
}

// fusedCells returns the fault cells of the statement under every fused
// fault kind.
func fusedCells(statement string) []scenarios.Cell {
	var out []scenarios.Cell
	for _, kind := range FusedFaultKinds() {
		out = append(out, scenarios.FaultCell(kind, statement))
	}
	return out
}

// Declared returns sc with the cells the store adds to its declared ones:
// on PostgreSQL, its fused statements under each fault kind
// (fusedDeclared); none on SQLite, which fuses nothing.
func (s Store) Declared(sc scenarios.Scenario) scenarios.Scenario {
	if s.pg == nil {
		return sc
	}
	var add []scenarios.Cell
	for _, statement := range fusedDeclared[sc.Name] {
		for _, cell := range fusedCells(statement) {
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

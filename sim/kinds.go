package sim

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/worker"
)

// InvClaimKinds: a claim takes only tasks of the kinds it names, and a
// worker's claims take only tasks of the kinds the scenario gives it.
const InvClaimKinds = "claim-only-served-kinds"

// handlerOf returns worker i's handler: the synthetic handler, or, when
// the scenario gives the worker kinds (Scenario.WorkerKinds), a registry
// of those kinds each run by the synthetic handler, so that the worker's
// claims name them.
func (w *World) handlerOf(i int) worker.Handler {
	served := w.sc.Served(i)
	if served == nil {
		return worker.Synthetic{}
	}
	kinds := worker.Kinds{}
	for _, k := range served {
		kinds[k] = worker.Kind{Handler: worker.Synthetic{}}
	}
	return kinds
}

// servedBy returns, by worker name, the kinds each worker of sc serves;
// nil when every worker serves every kind.
func servedBy(sc scenarios.Scenario) map[string][]string {
	if sc.WorkerKinds == nil {
		return nil
	}
	out := map[string][]string{}
	for i := 0; i < sc.Workers; i++ {
		out[workerName(i)] = sc.Served(i)
	}
	return out
}

// checkKinds checks, against the mirror before the claim req, that every
// task it took is of a kind the claim names and its worker serves; and
// records the claim's task-kind cells: the kinds it took, several in one
// claim, or nothing while a task of a kind the claim does not name was
// claimable.
func (l *lockstep) checkKinds(req model.ClaimRequest, res []model.Claimed, now time.Time) {
	served, isWorker := l.served[req.Worker]
	var kinds []string
	for _, c := range res {
		t, known := l.rows[c.Claim.TaskID]
		if !known {
			continue // InvClaimEligible reports it
		}
		if !req.Serves(t.Kind) {
			l.report(InvClaimKinds, t.ID, fmt.Sprintf("claim by %s naming kinds [%s] took a task of kind %s",
				req.Worker, strings.Join(req.Kinds, " "), t.Kind))
		}
		if isWorker && !slices.Contains(served, t.Kind) {
			l.report(InvClaimKinds, t.ID, fmt.Sprintf("worker %s serving [%s] claimed a task of kind %s",
				req.Worker, strings.Join(served, " "), t.Kind))
		}
		l.cover.add(scenarios.TaskKindCell(scenarios.ClaimedKind(t.Kind)))
		if !slices.Contains(kinds, t.Kind) {
			kinds = append(kinds, t.Kind)
		}
	}
	if len(kinds) > 1 {
		l.cover.add(scenarios.TaskKindCell(scenarios.KindClaimSeveral))
	}
	if len(res) == 0 && req.Kinds != nil {
		if _, other := l.claimable(now, model.ClaimRequest{}); other {
			l.cover.add(scenarios.TaskKindCell(scenarios.KindIdleOthersQueued))
		}
	}
}

// kindExpectation says how task's kind differs from what its request
// named ("" when it does not).
func kindExpectation(request model.SubmitRequest, task model.Task) string {
	want, err := model.NormalizeKind("kind", request.Kind)
	if err != nil {
		return fmt.Sprintf("its request's kind is refused: %v", err)
	}
	if task.Kind != want {
		return fmt.Sprintf("is of kind %s, its request named %s", task.Kind, want)
	}
	return ""
}

// knownTaskKindCell reports whether name is a task-kind cell's: a claim
// of a valid kind's name, or one of the fixed names.
func knownTaskKindCell(name string) bool {
	if kind, ok := strings.CutPrefix(name, scenarios.ClaimedKind("")); ok {
		return model.CheckKind("kind", kind) == nil
	}
	return name == scenarios.KindIdleOthersQueued || name == scenarios.KindClaimSeveral
}

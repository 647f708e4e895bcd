package sim

import (
	"fmt"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/worker"
)

// feedChecker is a checker with a claim history and a clock, enough for
// the reports of a group event.
func feedChecker() *checker {
	return &checker{w: &World{clock: clockwork.NewFakeClockAt(Epoch)}, history: model.NewHistory()}
}

// claimReport and releaseReport are accepted reports of one claim of
// task t under fence f by the worker name.
func claimReport(name, t string, f int64) worker.Report {
	return workerReport(name, model.WriteClaim, t, f)
}

func releaseReport(name, t string, f int64) worker.Report {
	return workerReport(name, model.WriteRelease, t, f)
}

func workerReport(name string, write model.Write, t string, f int64) worker.Report {
	r := worker.Report{Worker: name, Action: worker.Action(write), Write: write, Accepted: true}
	if write == model.WriteClaim {
		r.Claims = []model.Claim{{TaskID: t, Fence: f, Owner: name, Attempt: int(f), LeaseUntil: Epoch.Add(model.LeaseMin)}}
		return r
	}
	r.TaskID, r.Fence, r.Attempt = t, f, int(f)
	return r
}

// A draining worker's release of a task commits in a group's first round;
// its duplicated delivery is held for the second, where another actor's
// claim takes the task first (and the duplicate is refused as stale). The
// claimer reports before the worker, whose step returns only after the
// duplicate. Fed in report order, the claim history sees the release
// under fence 4 after the claim under fence 5; fed in the group's commit
// order, it sees what the queue did.
func TestGroupFeedTakesCommitOrder(t *testing.T) {
	release, duplicate, claim := &queue.HeldWrite{}, &queue.HeldWrite{}, &queue.HeldWrite{}
	stale := fmt.Errorf("release: %w", model.ErrStaleClaim)
	reports := []struct {
		actor int
		r     worker.Report
	}{{1, claimReport("careless", "t1", 5)}, {0, releaseReport("w1", "t1", 4)}}

	c := feedChecker()
	g := c.beginGroup()
	g.actor = 0
	g.own([]*queue.HeldWrite{release})
	g.actor = 1
	g.own([]*queue.HeldWrite{release, claim})
	g.committed([]*queue.HeldWrite{release}, []error{nil}, Epoch)
	g.actor = 0
	g.own([]*queue.HeldWrite{claim, duplicate})
	g.committed([]*queue.HeldWrite{claim, duplicate}, []error{nil, stale}, Epoch)
	for _, rep := range reports {
		g.actor = rep.actor
		c.report(rep.r)
	}
	require.Nil(t, c.pending, "nothing reported yet: the group holds the reports")
	c.endGroup()
	require.Nil(t, c.pending)

	inReportOrder := feedChecker()
	for _, rep := range reports {
		inReportOrder.report(rep.r)
	}
	require.NotNil(t, inReportOrder.pending)
	require.Equal(t, model.InvSingleClaim, inReportOrder.pending.Invariant)
}

// The feed orders by commit, not by fence: a stale release a group
// accepted after a newer claim of the task is still a violation, whichever
// actor reports first.
func TestGroupFeedKeepsStaleWrites(t *testing.T) {
	claim, release := &queue.HeldWrite{}, &queue.HeldWrite{}
	c := feedChecker()
	g := c.beginGroup()
	g.actor = 0
	g.own([]*queue.HeldWrite{claim})
	g.actor = 1
	g.own([]*queue.HeldWrite{claim, release})
	g.committed([]*queue.HeldWrite{claim, release}, []error{nil, nil}, Epoch)
	c.report(releaseReport("w1", "t1", 4))
	g.actor = 0
	c.report(claimReport("w0", "t1", 5))
	c.endGroup()
	require.NotNil(t, c.pending)
	require.Equal(t, model.InvSingleClaim, c.pending.Invariant)
	require.Contains(t, c.pending.Detail, "release under fence 4 accepted after a write under fence 5")
}

// The seeds whose group events fed the checker a draining worker's
// release after the claim that followed it (10,000-seed sweeps of
// 9b7ae67, docs/PERF.md) pass.
func TestGroupCommitOrderSeeds(t *testing.T) {
	for _, c := range []struct {
		scenario string
		seed     uint64
	}{{"long-running", 6490}, {"quota", 9166}, {"boundaries", 8094}, {"boundaries", 9386}, {"deadline", 8094}} {
		sc, err := scenarios.Get(c.scenario)
		require.NoError(t, err)
		r := Run(Config{Scenario: sc, Seed: c.seed})
		require.True(t, r.Pass, "make sim SEED=%d SCENARIO=%s: %s", c.seed, c.scenario, r.Summary())
	}
}

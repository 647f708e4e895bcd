package chaos

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"
)

// Task shapes: each lane cycles through them in this order, so a lane of
// at least len(shapes) tasks has one of each.
const (
	shapeEffects   = "effects"   // effects between timed steps
	shapeApproval  = "approval"  // a gate the caller approves or rejects, then an effect
	shapeLong      = "long"      // many long steps and an effect: kills land mid-step
	shapeTransient = "transient" // a step that fails transiently, then an effect
	shapeCancel    = "cancel"    // long steps; the caller cancels it
	shapePermanent = "permanent" // an effect, then a step that fails for good
	shapeBudget    = "budget"    // its last step (an effect) would overspend the budget
	shapeSteps     = "steps"     // more steps than its step limit
)

var shapes = []string{shapeEffects, shapeApproval, shapeLong, shapeTransient, shapeCancel, shapePermanent, shapeBudget, shapeSteps}

var effectNames = []string{"charge", "ship", "email", "refund"}

// plannedTask is one task of the workload, drawn from the seed.
type plannedTask struct {
	Lane       int
	Shape      string
	User, Key  string
	Payload    string
	CostBudget int64
	StepsMax   int
	// SubmitAfter is the share of the attack plan (0 to 1) that must be
	// done before the caller submits it.
	SubmitAfter float64
	// CancelAfter, when positive, is how long after the submit the caller
	// cancels it.
	CancelAfter time.Duration
	// Reject makes the caller reject its approval instead of approving.
	Reject bool
	// ApproveAfter is how long the caller lets it wait at its gate.
	ApproveAfter time.Duration
}

// synthStep is one step of a synthetic payload (worker.Synthetic's
// format), with empty fields left out.
type synthStep struct {
	Cost       int64  `json:"cost,omitempty"`
	Effect     string `json:"effect,omitempty"`
	Approval   string `json:"approval,omitempty"`
	Fail       string `json:"fail,omitempty"`
	Times      int    `json:"times,omitempty"`
	DurationMs int64  `json:"duration_ms,omitempty"`
}

// submitShare is the share of the attack plan over which the submits after
// the first third are spread, so that work keeps arriving until the
// attacks are nearly over.
const submitShare = 0.85

// planWorkload draws n tasks over lanes lanes. A third are submitted at the
// start and the rest spread evenly over the attack plan's progress.
func planWorkload(rng *rand.Rand, n, lanes int) []plannedTask {
	out := make([]plannedTask, n)
	early := n / 3
	for i := range out {
		lane := i % lanes
		shape := shapes[(i/lanes)%len(shapes)]
		t := plannedTask{Lane: lane, Shape: shape, User: fmt.Sprintf("u%d", rng.IntN(6)), Key: fmt.Sprintf("chaos-%d", i)}
		if i >= early && n > early {
			t.SubmitAfter = submitShare * float64(i-early+1) / float64(n-early)
		}
		steps := drawSteps(rng, &t)
		b, err := json.Marshal(struct {
			Steps []synthStep `json:"steps"`
		}{steps})
		if err != nil {
			panic("chaos: marshal a payload: " + err.Error()) // plain structs always marshal
		}
		t.Payload = string(b)
		out[i] = t
	}
	return out
}

// drawSteps draws the steps of t's shape and sets its budget and limits.
func drawSteps(rng *rand.Rand, t *plannedTask) []synthStep {
	ms := func(lo, hi int64) int64 { return lo + rng.Int64N(hi-lo+1) }
	effect := func() string { return effectNames[rng.IntN(len(effectNames))] }
	var steps []synthStep
	switch t.Shape {
	case shapeEffects:
		steps = []synthStep{{Cost: 1, DurationMs: ms(200, 900)}, {Cost: 2, Effect: effect()},
			{Cost: 1, DurationMs: ms(300, 1200)}, {Cost: 1, Effect: effect(), DurationMs: ms(0, 300)}}
	case shapeApproval:
		steps = []synthStep{{Cost: 1, DurationMs: ms(200, 600)}, {Approval: "manager"}, {Cost: 2, Effect: effect()}, {Cost: 1, DurationMs: ms(200, 800)}}
		t.Reject = rng.IntN(4) == 0
		t.ApproveAfter = time.Duration(ms(200, 2000)) * time.Millisecond
	case shapeLong:
		n := 5 + rng.IntN(4)
		for i := 0; i < n; i++ {
			steps = append(steps, synthStep{Cost: 1, DurationMs: ms(400, 1100)})
		}
		steps[n/2].Effect = effect()
	case shapeTransient:
		steps = []synthStep{{Cost: 1, DurationMs: ms(100, 500)}, {Cost: 1, Fail: "transient", Times: 1 + rng.IntN(2)},
			{Cost: 2, Effect: effect(), DurationMs: ms(100, 600)}}
	case shapeCancel:
		for i := 0; i < 12; i++ {
			steps = append(steps, synthStep{Cost: 1, DurationMs: ms(300, 700)})
		}
		steps[2].Effect = effect()
		t.CancelAfter = time.Duration(ms(500, 4000)) * time.Millisecond
	case shapePermanent:
		steps = []synthStep{{Cost: 1, Effect: effect(), DurationMs: ms(100, 600)}, {Cost: 1, Fail: "permanent"}}
	case shapeBudget:
		steps = []synthStep{{Cost: 4, DurationMs: ms(100, 500)}, {Cost: 4, DurationMs: ms(100, 500)}, {Cost: 4, Effect: effect()}}
		t.CostBudget, t.StepsMax = 10, 6
		return steps
	case shapeSteps:
		for i := 0; i < 6; i++ {
			steps = append(steps, synthStep{Cost: 1, DurationMs: ms(100, 400)})
		}
		steps[1].Effect = effect()
		t.CostBudget, t.StepsMax = 50, 4
		return steps
	}
	var cost int64
	for _, s := range steps {
		cost += s.Cost
	}
	t.CostBudget, t.StepsMax = cost+int64(rng.IntN(5)), len(steps)+rng.IntN(3)
	return steps
}

package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/leasehold/leasehold/model"
)

// StepSpec describes one step of a task before it runs, so the slot can
// check the budget and route gates and effects.
type StepSpec struct {
	Cost     int64
	Effect   string        // non-empty: the step makes this customer-visible call
	Approval string        // non-empty: the step is an approval gate
	Duration time.Duration // how long the step's own work takes
	// Data is the handler's own description of the step, handed back to
	// Run unchanged; the slot never reads it.
	Data any
}

// Handler knows a kind of task: its steps and how to run each one.
type Handler interface {
	// Plan returns the task's steps. It is called once per claim. An error
	// fails the task permanently.
	Plan(task model.Task) ([]StepSpec, error)
	// Run performs step index's own work (not its effect call) and returns
	// the checkpoint to save with it; step is what Plan returned for that
	// index in this claim. Errors are classified with Classify.
	Run(ctx context.Context, task model.Task, index int, step StepSpec) (checkpoint string, err error)
}

// Handler error classes: wrap a step's error with one of these so Classify
// routes it (unwrapped errors count as transient).
var (
	ErrTransient = errors.New("transient failure")
	ErrPermanent = errors.New("permanent failure")
)

// Classify returns the failure class of a handler error.
func Classify(err error) model.FailureClass {
	if errors.Is(err, ErrPermanent) {
		return model.Permanent
	}
	return model.Transient
}

// SyntheticStepsMax bounds the steps a synthetic payload may declare.
const SyntheticStepsMax = 256

// SyntheticStep is one entry of a synthetic payload.
type SyntheticStep struct {
	Cost       int64  `json:"cost"`
	Effect     string `json:"effect"`
	Approval   string `json:"approval"`
	Fail       string `json:"fail"`
	Times      int    `json:"times"`
	DurationMs int64  `json:"duration_ms"`
}

type syntheticPayload struct {
	Steps []SyntheticStep `json:"steps"`
}

// Synthetic runs what a task's payload describes:
//
//	{"steps": [{"cost": 2}, {"cost": 5, "effect": "charge"}, {"approval": "manager"},
//	           {"cost": 1, "fail": "transient", "times": 1}, {"cost": 1, "duration_ms": 1500}]}
//
// Each step costs its cost; effect makes a customer-visible call under the
// step's operation ID; approval is a gate; fail fails the step (transient
// while fewer than times attempts have been charged, or permanent);
// duration_ms is how long the step takes.
type Synthetic struct{}

// ParseSynthetic parses and checks a synthetic payload.
func ParseSynthetic(payload string) ([]SyntheticStep, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(payload)))
	dec.DisallowUnknownFields()
	var p syntheticPayload
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("synthetic payload: %w", err)
	}
	if err := dec.Decode(new(json.RawMessage)); !errors.Is(err, io.EOF) {
		return nil, errors.New("synthetic payload: trailing data after the object")
	}
	if len(p.Steps) > SyntheticStepsMax {
		return nil, fmt.Errorf("synthetic payload: %d steps (limit %d)", len(p.Steps), SyntheticStepsMax)
	}
	for i, s := range p.Steps {
		switch {
		case s.Cost < 0 || s.Cost > model.CostBudgetMax:
			return nil, fmt.Errorf("synthetic payload: step %d: cost %d out of range", i, s.Cost)
		case s.Fail != "" && s.Fail != "transient" && s.Fail != "permanent":
			return nil, fmt.Errorf("synthetic payload: step %d: fail must be transient or permanent, got %q", i, s.Fail)
		case s.Times < 0 || s.DurationMs < 0 || s.DurationMs > 24*3600*1000:
			return nil, fmt.Errorf("synthetic payload: step %d: times or duration_ms out of range", i)
		case s.Approval != "" && (s.Effect != "" || s.Fail != "" || s.Cost != 0 || s.DurationMs != 0 || s.Times != 0):
			return nil, fmt.Errorf("synthetic payload: step %d: an approval gate does nothing else", i)
		case s.Approval != "":
			if err := model.CheckGate(s.Approval); err != nil {
				return nil, fmt.Errorf("synthetic payload: step %d: %w", i, err)
			}
		}
	}
	return p.Steps, nil
}

// Plan parses the payload once and returns its steps, each carrying its
// SyntheticStep as Data for Run.
func (Synthetic) Plan(task model.Task) ([]StepSpec, error) {
	steps, err := ParseSynthetic(task.Payload)
	if err != nil {
		return nil, err
	}
	out := make([]StepSpec, len(steps))
	for i, s := range steps {
		out[i] = StepSpec{Cost: s.Cost, Effect: s.Effect, Approval: s.Approval,
			Duration: time.Duration(s.DurationMs) * time.Millisecond, Data: s}
	}
	return out, nil
}

// Run fails the step as its plan says and otherwise succeeds with no
// checkpoint of its own (the step index is the resume point). It reads the
// step's SyntheticStep from step.Data, without parsing the payload again; a
// step Plan did not make is a permanent error.
func (Synthetic) Run(_ context.Context, task model.Task, index int, step StepSpec) (string, error) {
	s, ok := step.Data.(SyntheticStep)
	if !ok {
		return "", fmt.Errorf("%w: step %d of task %s was not planned by the synthetic handler", ErrPermanent, index, task.ID)
	}
	switch {
	case s.Fail == "permanent":
		return "", fmt.Errorf("%w: step %d fails permanently", ErrPermanent, index)
	case s.Fail == "transient" && task.AttemptsCharged < s.Times:
		return "", fmt.Errorf("%w: step %d fails on attempt %d", ErrTransient, index, task.AttemptsCharged+1)
	}
	return "", nil
}

package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
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

// Bounds of a synthetic payload.
const (
	SyntheticStepsMax    = 256        // steps a payload may declare
	SyntheticTimesMax    = 10_000     // a step's times
	SyntheticDurationMax = 86_400_000 // a step's duration_ms: a day
	SyntheticNameMax     = 64         // bytes of an effect name
)

// SyntheticStep is one entry of a synthetic payload.
type SyntheticStep struct {
	Cost       int64  `json:"cost"`
	Effect     string `json:"effect"`
	Approval   string `json:"approval"`
	Fail       string `json:"fail"`
	Times      int    `json:"times"`
	DurationMs int64  `json:"duration_ms"`
}

// Synthetic runs what a task's payload describes:
//
//	{"steps": [{"cost": 2}, {"cost": 5, "effect": "charge"}, {"approval": "manager"},
//	           {"cost": 1, "fail": "transient", "times": 1}, {"cost": 1, "duration_ms": 1500}]}
//
// Each step costs its cost; effect makes a customer-visible call under the
// step's operation ID; approval is a gate; fail fails the step (transient
// while the task has failed fewer than times attempts over its whole life,
// model.Task.AttemptsFailed, which an operator's requeue does not reset, so
// a requeued task goes on from where it was; or permanent); duration_ms is
// how long the step takes.
type Synthetic struct{}

// ValidateSynthetic checks a payload the way the synthetic handler will
// plan it, so a queue can refuse at intake what would fail on the first
// claim (queue.Options.ValidatePayload).
func ValidateSynthetic(payload string) error {
	_, err := ParseSynthetic(payload)
	return err
}

// ParseSynthetic parses and checks a synthetic payload. A refusal is a
// *model.ValidationError whose Field is the path of what is wrong
// (steps[2].fail) and whose Problem states the rule; it never quotes the
// value refused, so payload contents cannot reach an error, a log or a
// task's last_error through it.
func ParseSynthetic(payload string) ([]SyntheticStep, error) {
	top, err := syntheticObject("payload", []byte(payload), true)
	if err != nil {
		return nil, err
	}
	if err := onlyFields("", top, "steps"); err != nil {
		return nil, err
	}
	raw, ok := top["steps"]
	if !ok || isNull(raw) {
		return nil, nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(raw, &raws); err != nil {
		return nil, syntheticInvalid("steps", "must be an array of step objects")
	}
	if len(raws) > SyntheticStepsMax {
		return nil, syntheticInvalid("steps", fmt.Sprintf("%d steps (limit %d)", len(raws), SyntheticStepsMax))
	}
	steps := make([]SyntheticStep, len(raws))
	for i, r := range raws {
		if steps[i], err = parseSyntheticStep(i, r); err != nil {
			return nil, err
		}
	}
	return steps, nil
}

// syntheticFields are a step's fields, in the order they are checked.
var syntheticFields = []string{"approval", "cost", "duration_ms", "effect", "fail", "times"}

func parseSyntheticStep(i int, raw json.RawMessage) (SyntheticStep, error) {
	var s SyntheticStep
	at := fmt.Sprintf("steps[%d]", i)
	if isNull(raw) {
		return s, nil
	}
	fields, err := syntheticObject(at, raw, false)
	if err != nil {
		return s, err
	}
	if err := onlyFields(at+".", fields, syntheticFields...); err != nil {
		return s, err
	}
	name := func(field string, ok func(string) bool, rule string) (string, error) {
		v, err := syntheticString(at+"."+field, fields[field], rule)
		if err == nil && v != "" && !ok(v) {
			err = syntheticInvalid(at+"."+field, rule)
		}
		return v, err
	}
	integer := func(field string, most int64) (int64, error) {
		return syntheticInt(at+"."+field, fields[field], most)
	}
	if s.Cost, err = integer("cost", model.CostBudgetMax); err != nil {
		return s, err
	}
	if s.DurationMs, err = integer("duration_ms", SyntheticDurationMax); err != nil {
		return s, err
	}
	times, err := integer("times", SyntheticTimesMax)
	if err != nil {
		return s, err
	}
	s.Times = int(times)
	if s.Effect, err = name("effect", isEffectName, fmt.Sprintf("must be a name of at most %d letters, digits or ._-:/", SyntheticNameMax)); err != nil {
		return s, err
	}
	if s.Approval, err = name("approval", func(g string) bool { return model.CheckGate(g) == nil },
		fmt.Sprintf("must be a gate name of at most %d letters, digits or ._-:/", model.GateLengthMax)); err != nil {
		return s, err
	}
	if s.Fail, err = name("fail", func(f string) bool { return f == "transient" || f == "permanent" },
		`must be "transient" or "permanent"`); err != nil {
		return s, err
	}
	if s.Approval != "" && (s.Effect != "" || s.Fail != "" || s.Cost != 0 || s.DurationMs != 0 || s.Times != 0) {
		return s, syntheticInvalid(at, "an approval gate does nothing else (no cost, effect, fail, times or duration_ms)")
	}
	return s, nil
}

func syntheticInvalid(field, problem string) error {
	return &model.ValidationError{Field: field, Problem: problem}
}

func isNull(raw json.RawMessage) bool { return raw == nil || string(bytes.TrimSpace(raw)) == "null" }

// syntheticObject decodes one JSON object into its members (a whole
// payload when whole is set: nothing may follow it).
func syntheticObject(field string, raw []byte, whole bool) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	var members map[string]json.RawMessage
	if err := dec.Decode(&members); err != nil || members == nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, syntheticInvalid(field, "not well-formed JSON")
		}
		return nil, syntheticInvalid(field, "must be a JSON object")
	}
	if whole {
		if err := dec.Decode(new(json.RawMessage)); !errors.Is(err, io.EOF) {
			return nil, syntheticInvalid(field, "trailing data after the object")
		}
	}
	return members, nil
}

// onlyFields refuses the first (in byte order) member not in allowed,
// naming it when it is a plain name and saying only that there is one
// otherwise.
func onlyFields(prefix string, members map[string]json.RawMessage, allowed ...string) error {
	var unknown []string
	for k := range members {
		if !slices.Contains(allowed, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	rule := "unknown field (allowed: " + strings.Join(allowed, ", ") + ")"
	if k := unknown[0]; len(k) <= SyntheticNameMax && isFieldName(k) {
		return syntheticInvalid(prefix+k, rule)
	}
	return syntheticInvalid(strings.TrimSuffix(prefix, ".")+"(a field)", rule)
}

func syntheticString(field string, raw json.RawMessage, rule string) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", syntheticInvalid(field, rule)
	}
	return v, nil
}

func syntheticInt(field string, raw json.RawMessage, most int64) (int64, error) {
	if isNull(raw) {
		return 0, nil
	}
	v, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64)
	if err != nil || v < 0 || v > most {
		return 0, syntheticInvalid(field, fmt.Sprintf("must be an integer from 0 to %d", most))
	}
	return v, nil
}

func isFieldName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return s != ""
}

func isEffectName(s string) bool {
	if len(s) > SyntheticNameMax {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._-:/", c) >= 0) {
			return false
		}
	}
	return true
}

// Plan parses the payload once and returns its steps, each carrying its
// SyntheticStep as Data for Run.
func (Synthetic) Plan(task model.Task) ([]StepSpec, error) {
	steps, err := ParseSynthetic(task.Payload)
	if err != nil {
		return nil, fmt.Errorf("synthetic payload: %w", err)
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
	case s.Fail == "transient" && task.AttemptsFailed < s.Times:
		return "", fmt.Errorf("%w: step %d fails on attempt %d", ErrTransient, index, task.AttemptsFailed+1)
	}
	return "", nil
}

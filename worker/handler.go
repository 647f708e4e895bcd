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
	Effect   string // non-empty: the step makes this customer-visible call, through the effects ledger
	Approval string // non-empty: the step is an approval gate
	// Duration is how long the step's run takes at the least: its executor
	// waits it out (with heartbeats going on, the run's context cancelled
	// as for any run) before calling Run. It is the synthetic handler's way
	// to say how long a step takes (duration_ms), which makes a synthetic
	// step a handler that takes that long, on the same path as any other;
	// a handler of your own leaves it zero and takes as long as its Run
	// does.
	Duration time.Duration
	// Timeout, when positive, bounds the step's run: once it has passed,
	// the run's context is cancelled with ErrStepTimeout and the step
	// fails as a transient failure. Zero takes the worker's
	// Config.StepTimeout.
	Timeout time.Duration
	// Data is the handler's own description of the step, handed back to
	// Run unchanged; the slot never reads it.
	Data any
	// Ledger, when set, says the step's Run makes a customer-visible
	// effect itself (a command the worker runs, say) instead of leaving
	// it to a call of the worker's Service after the run. The worker
	// records the intent before the run begins and, once the run
	// succeeds, the receipt, whose result is the run's checkpoint; an
	// operation already receipted is not run again (its result becomes
	// the step's checkpoint), and one an earlier run left without a
	// receipt is settled as Ledger.Kind says before anything runs. Such a
	// step needs no Service; Effect, if set, only names it.
	Ledger *RunLedger
}

// RunLedger is what the worker knows of an effect a step's run makes
// itself (StepSpec.Ledger).
type RunLedger struct {
	// Kind is what the effect's target can do, with the guarantee that
	// goes with it (see ServiceKind): Dedup runs the step again under the
	// same operation ID; Queryable and Fenced ask Status (Queryable sends
	// an operation an earlier claim left, and that Status says was not
	// applied, to needs_review); Plain sends any operation whose outcome
	// is unknown to needs_review.
	Kind ServiceKind
	// Status answers, for a kind that can (ServiceKind.CanAnswer),
	// whether the operation was applied, and its result; a Fenced target
	// also registers fence. It runs through the executor as the step's
	// run does, heartbeated, under the step's timeout, its context
	// cancelled when the claim ends (not when cancellation is requested:
	// the effect is settled first). An error leaves the outcome unknown
	// and is asked again after a backoff.
	Status func(ctx context.Context, opID string, fence int64) (applied bool, result string, err error)
}

// Handler knows a kind of task: its steps and how to run each one. This
// is the planned form, for work with costs, approval gates and ledgered
// effects; HandlerFunc is the simple form, one function run as one step.
//
// Run runs through the worker's Executor while the worker keeps
// heartbeating: in a live Runner, in a goroutine of its own, however long
// it takes. Its context is cancelled, with a cause context.Cause reads
// (ErrCancelRequested, ErrLeaseLost, ErrShutdown, ErrStepTimeout), when
// the task's cancellation is requested, the claim is lost, the worker's
// shutdown grace ends or the step's timeout passes; Run should then stop
// and return. The context is the handler's alone: the worker's queue
// writes never use it. A result that arrives after the claim was lost is
// dropped and logged, never written.
type Handler interface {
	// Plan returns the task's steps. It is called once per claim. An error
	// fails the task permanently.
	Plan(task model.Task) ([]StepSpec, error)
	// Run performs step index's own work (not its effect call) and returns
	// the checkpoint to save with it (at most model.CheckpointMax bytes);
	// step is what Plan returned for that index in this claim. Errors are
	// classified with Classify.
	Run(ctx context.Context, task model.Task, index int, step StepSpec) (checkpoint string, err error)
}

// Effectful is a Handler that says whether its plans may declare ledgered
// effects (StepSpec.Effect). Only such a handler needs a Service: New and
// NewRunner refuse a worker whose handler says it may and that has none.
// A handler that does not implement it is taken to declare none; should
// a plan declare one all the same on a worker without a Service, the task
// fails permanently before any of its steps runs.
type Effectful interface {
	MakesEffects() bool
}

// HandlerFunc is the simple form of a handler: one function of the task,
// run as the task's one step, through the same executor, heartbeats and
// cancellation as a planned Handler's steps (budget, step limit,
// deadline and cancellation are checked before it runs; it costs
// nothing).
//
// opID is the step's operation ID (model.OperationID(task.ID, 0)), the
// same on every attempt: give it as the idempotency key to any external
// service the function calls. Such a call is the function's own, outside
// the effects ledger: the worker records no intent or receipt for it and
// never reconciles it, so it is applied once only if the service
// deduplicates by that key (a service that does not may apply it once
// per attempt). For an effect the ledger should guard, write a planned
// Handler whose step declares StepSpec.Effect, and give the worker a
// Service.
//
// The string returned is saved as the step's checkpoint (at most
// model.CheckpointMax bytes). A HandlerFunc needs no Service.
type HandlerFunc func(ctx context.Context, task model.Task, opID string) (string, error)

// Plan returns the one step.
func (f HandlerFunc) Plan(model.Task) ([]StepSpec, error) { return []StepSpec{{}}, nil }

// Run calls f with the step's operation ID.
func (f HandlerFunc) Run(ctx context.Context, task model.Task, index int, _ StepSpec) (string, error) {
	return f(ctx, task, model.OperationID(task.ID, index))
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
	SyntheticDurationMax = 86_400_000 // a step's duration_ms and timeout_ms: a day
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
	TimeoutMs  int64  `json:"timeout_ms"`
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
// how long the step takes: the step is a handler that takes that long
// (StepSpec.Duration), in real time in a live worker and in simulated
// time in the simulator, heartbeated and cancellable like any other;
// timeout_ms is the step's timeout (StepSpec.Timeout).
type Synthetic struct{}

// MakesEffects reports that a synthetic plan may declare ledgered effects:
// a worker running it needs a Service.
func (Synthetic) MakesEffects() bool { return true }

// ValidateSynthetic checks a payload the way the synthetic handler will
// plan it, so a queue can refuse at intake what would fail on the first
// claim: it is the validator of model.KindSynthetic
// (queue.Options.Validators).
func ValidateSynthetic(payload json.RawMessage) error {
	_, err := ParseSynthetic(string(payload))
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
var syntheticFields = []string{"approval", "cost", "duration_ms", "effect", "fail", "times", "timeout_ms"}

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
	if s.TimeoutMs, err = integer("timeout_ms", SyntheticDurationMax); err != nil {
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
	if s.Approval != "" && (s.Effect != "" || s.Fail != "" || s.Cost != 0 || s.DurationMs != 0 || s.Times != 0 || s.TimeoutMs != 0) {
		return s, syntheticInvalid(at, "an approval gate does nothing else (no cost, effect, fail, times, duration_ms or timeout_ms)")
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
			Duration: time.Duration(s.DurationMs) * time.Millisecond, Timeout: time.Duration(s.TimeoutMs) * time.Millisecond, Data: s}
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

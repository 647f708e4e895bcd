package worker

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/leasehold/leasehold/model"
)

// Kinds is a registry of the kinds a worker serves: each kind's handler,
// and the validator of its payloads. As a Config's Handler it routes each
// claimed task to its kind's handler, and the worker's claims name its
// kinds (model.ClaimRequest.Kinds), so that it never claims a task of a
// kind it has no handler for. Give the same Kinds' Validators to the
// queue and the API, so that a payload a handler could not run is refused
// at intake.
//
//	kinds := worker.Kinds{
//		"report": {Handler: worker.HandlerFunc(report), Validate: checkReport},
//		"email":  {Handler: worker.HandlerFunc(email)},
//	}
//
// A worker whose Handler is not a Kinds claims tasks of every kind.
type Kinds map[string]Kind

// Kind is one kind a worker serves.
type Kind struct {
	// Handler runs the kind's tasks (required): a HandlerFunc, or a
	// planned Handler.
	Handler Handler
	// Validate, when set, checks the kind's payloads at intake; nil
	// accepts any JSON object.
	Validate model.PayloadValidator
}

// Check refuses a registry that names no kind, a kind whose name
// model.CheckKind refuses, or a kind without a handler.
func (k Kinds) Check() error {
	if len(k) == 0 {
		return fmt.Errorf("worker: Kinds names no kind")
	}
	for _, name := range k.Served() {
		if err := model.CheckKind("kind", name); err != nil {
			return fmt.Errorf("worker: Kinds: %w", err)
		}
		if k[name].Handler == nil {
			return fmt.Errorf("worker: Kinds: kind %s has no handler", name)
		}
	}
	return nil
}

// Served returns the kinds, sorted: what the worker's claims name.
func (k Kinds) Served() []string {
	return slices.Sorted(maps.Keys(k))
}

// Validators returns the validator of each kind that has one, for
// queue.Options.Validators and httpapi.Options.Validators.
func (k Kinds) Validators() map[string]model.PayloadValidator {
	out := map[string]model.PayloadValidator{}
	for name, kind := range k {
		if kind.Validate != nil {
			out[name] = kind.Validate
		}
	}
	return out
}

// MakesEffects reports whether any kind's handler may declare ledgered
// effects (see Effectful): then the worker needs a Service.
func (k Kinds) MakesEffects() bool {
	for _, kind := range k {
		if e, ok := kind.Handler.(Effectful); ok && e.MakesEffects() {
			return true
		}
	}
	return false
}

// Plan plans the task with its kind's handler. A task of a kind the
// registry has no handler for (claimed by a claim that named every kind)
// fails permanently.
func (k Kinds) Plan(task model.Task) ([]StepSpec, error) {
	h, err := k.handler(task.Kind)
	if err != nil {
		return nil, err
	}
	return h.Plan(task)
}

// Run runs the step with its task's kind's handler.
func (k Kinds) Run(ctx context.Context, task model.Task, index int, step StepSpec) (string, error) {
	h, err := k.handler(task.Kind)
	if err != nil {
		return "", err
	}
	return h.Run(ctx, task, index, step)
}

func (k Kinds) handler(kind string) (Handler, error) {
	h := k[kind].Handler
	if h == nil {
		return nil, fmt.Errorf("no handler for kind %s: %w", kind, ErrPermanent)
	}
	return h, nil
}

// servedKinds is the kinds a worker's claims name: its Handler's, when
// it is a Kinds, and nil (every kind) otherwise.
func servedKinds(h Handler) []string {
	if k, ok := h.(Kinds); ok {
		return k.Served()
	}
	return nil
}

// SyntheticKind is the synthetic handler as a kind of a registry, with
// its validator: Kinds{model.KindSynthetic: worker.SyntheticKind()}.
func SyntheticKind() Kind {
	return Kind{Handler: Synthetic{}, Validate: ValidateSynthetic}
}

package queue

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/leasehold/leasehold/internal/broken"
	"github.com/leasehold/leasehold/model"
)

// Submit validates and normalizes a request, recognises an exact replay of
// an earlier one (returning the original task's ID with Replay set and
// writing nothing), refuses a changed request under a used key, applies
// admission, and stores the task. It returns a durable task ID or an error,
// never both and never a false success.
func (q *Queue) Submit(ctx context.Context, req model.SubmitRequest) (model.SubmitResult, error) {
	if req.ScheduleID != "" || req.ScheduleRun != 0 {
		return model.SubmitResult{}, &model.ValidationError{Field: "schedule_id", Problem: "set only by the scheduler"}
	}
	n, err := q.Normalize(req)
	if err != nil {
		return model.SubmitResult{}, err
	}
	if err := model.CheckCallerKey(n.Key); err != nil {
		return model.SubmitResult{}, err
	}
	if err := q.checkPayload(n.Kind, n.Payload); err != nil {
		return model.SubmitResult{}, err
	}
	var res model.SubmitResult
	alone := &submission{n: n, actor: submitter(ctx, n.User), scope: model.ScopeOf(ctx), out: &res}
	err = q.writeRetryingOp(ctx, "submit", func(t *txn) error {
		res, err = t.submit(n, n.User)
		return err
	}, nil, alone)
	if err != nil {
		return model.SubmitResult{}, err
	}
	return res, nil
}

// Normalize validates and normalizes req as Submit does before anything
// else, with the defaults of its kind (Options.Defaults) filling the cost
// budget and step limit it names none of, after its hash is taken
// (model.NormalizeWith). An intake in front of the queue (an HTTP API)
// checks a request with it so as to refuse what Submit would.
func (q *Queue) Normalize(req model.SubmitRequest) (model.Normalized, error) {
	return model.NormalizeWith(req, q.defaults)
}

// submitter is the actor a submitted event names: who submitted for the
// user when ctx says (model.WithActor), else actor.
func submitter(ctx context.Context, actor string) string {
	if a := model.ActorOf(ctx); a != "" {
		return a
	}
	return actor
}

// checkPayload runs the kind's validator (Options.Validators), if it has
// one, on a normalized payload; a kind Options.Validators does not name
// is put to Options.UnknownKind, if set.
func (q *Queue) checkPayload(kind, payload string) error {
	validate, named := q.validators[kind]
	if !named && q.unknownKind != nil {
		return q.unknownKind(kind)
	}
	if validate == nil {
		return nil
	}
	if err := validate(json.RawMessage(payload)); err != nil {
		return PayloadError(err)
	}
	return nil
}

// PayloadError turns a payload validator's refusal into the queue's: a
// *model.ValidationError (so ErrInvalidInput) whose field is the payload's
// path of the refused part (payload.steps[2].fail) when the validator named
// one, and payload otherwise.
func PayloadError(err error) error {
	var v *model.ValidationError
	if !errors.As(err, &v) {
		return &model.ValidationError{Field: "payload", Problem: strings.Join(strings.Fields(err.Error()), " ")}
	}
	field := v.Field
	if field != "payload" && !strings.HasPrefix(field, "payload.") {
		field = "payload." + field
	}
	return &model.ValidationError{Field: field, Problem: v.Problem}
}

// submit stores a normalized request, or recognises its replay: in the
// store's one statement where it has one (submitone.go), else in the
// protocol's.
func (t *txn) submit(n model.Normalized, actor string) (model.SubmitResult, error) {
	if f := t.q.store.Capabilities().Submit; f != nil {
		return t.submitInOne(f, n, actor)
	}
	var id, hash string
	err := t.queryRow(qTaskByKey, sql.Named("user", n.User), sql.Named("key", n.Key)).Scan(&id, &hash)
	switch {
	case err == nil && broken.Pick(broken.ChangedRequestReplayed, hash == n.Hash, true):
		return model.SubmitResult{TaskID: id, Replay: true}, nil
	case err == nil:
		return model.SubmitResult{}, fmt.Errorf("user %s key %s is task %s: %w", n.User, n.Key, id, model.ErrIdempotencyConflict)
	case !errors.Is(err, sql.ErrNoRows):
		return model.SubmitResult{}, fmt.Errorf("queue: submit: look up key: %w", err)
	}
	if err := n.CheckTimely(t.now); err != nil {
		return model.SubmitResult{}, err
	}
	if _, err := t.exec(qUserEnsure, sql.Named("user", n.User)); err != nil {
		return model.SubmitResult{}, err
	}
	limits, err := t.limits()
	if err != nil {
		return model.SubmitResult{}, err
	}
	if err := t.admit(n.User, limits); err != nil {
		return model.SubmitResult{}, err
	}
	return t.insertTask(n, actor, limits)
}

// admit refuses a submit beyond the user's or the overall depth cap.
func (t *txn) admit(user string, limits model.Limits) error {
	var mine, depthLimit, total int
	if err := t.queryRow(qUserDepth, sql.Named("user", user), sql.Named("total", limits.DepthMax != 0)).
		Scan(&mine, &depthLimit, &total); err != nil {
		return fmt.Errorf("queue: admission: %w", err)
	}
	mine -= broken.Pick(broken.DepthCapOffByOne, 0, 1) // the broken variant admits one task over the cap
	if depthLimit > 0 && mine >= depthLimit {
		return fmt.Errorf("user %s has %d active tasks (limit %d): %w", user, mine, depthLimit, model.ErrQueueFull)
	}
	if limits.DepthMax == 0 {
		return nil
	}
	if total >= limits.DepthMax {
		return fmt.Errorf("%d active tasks (limit %d): %w", total, limits.DepthMax, model.ErrQueueFull)
	}
	return nil
}

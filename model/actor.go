package model

import "context"

type actorKey struct{}

// WithActor returns a context that names who submits through it: the
// audit trail records that name as the submitted event's actor instead of
// the task's user (an HTTP token's name, acting for the user). The actor
// is not part of the request, so it is not in the request's canonical
// hash: a replay through another token of the same user still matches.
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// ActorOf returns the actor ctx carries, or "".
func ActorOf(ctx context.Context) string {
	a, _ := ctx.Value(actorKey{}).(string)
	return a
}

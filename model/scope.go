package model

import "context"

// Scopes an action can be taken under; the audit trail records which.
const (
	ScopeSubmit  = "submit"
	ScopeApprove = "approve"
	ScopeOperate = "operate"
)

type scopeKey struct{}

// WithScope returns a context that carries the scope actions taken with it
// are recorded under.
func WithScope(ctx context.Context, scope string) context.Context {
	return context.WithValue(ctx, scopeKey{}, scope)
}

// ScopeOf returns the scope ctx carries, or "".
func ScopeOf(ctx context.Context) string {
	s, _ := ctx.Value(scopeKey{}).(string)
	return s
}

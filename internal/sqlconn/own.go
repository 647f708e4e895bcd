package sqlconn

import "context"

// ownTransactionKey is the context key OwnTransaction sets.
type ownTransactionKey struct{}

// OwnTransaction returns ctx marked for a statement that is its own
// transaction: one run outside BEGIN and COMMIT whose effects the server
// commits when it ends (PostgreSQL's fused statements: a lone submit, a
// fused group). name is the statement's name. A layer below database/sql
// reads the mark with OwnTransactionOf: the storage fault injector makes
// its BEGIN and COMMIT faults land on such a statement, as they land on a
// transaction's BEGIN and COMMIT.
func OwnTransaction(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, ownTransactionKey{}, name)
}

// OwnTransactionOf returns the name OwnTransaction marked ctx with, or
// false for a statement that is not marked.
func OwnTransactionOf(ctx context.Context) (string, bool) {
	name, ok := ctx.Value(ownTransactionKey{}).(string)
	return name, ok
}

package sqlconn

import (
	"context"
	"database/sql/driver"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// countedStmt counts how often it is closed.
type countedStmt struct{ closed *int }

func (s countedStmt) Close() error                               { *s.closed++; return nil }
func (s countedStmt) NumInput() int                              { return -1 }
func (s countedStmt) Exec([]driver.Value) (driver.Result, error) { return nil, nil }
func (s countedStmt) Query([]driver.Value) (driver.Rows, error)  { return nil, nil }

// TestLenderLendsOneAtATime: a kept statement is lent again; one that is
// out is not lent twice (a fresh one is prepared); one statement a text
// is kept, and past the bound none; Close closes what is kept.
func TestLenderLendsOneAtATime(t *testing.T) {
	prepared, closed := 0, 0
	prepare := func() (driver.Stmt, error) { prepared++; return countedStmt{&closed}, nil }
	l := NewLender(2)
	a, err := l.Lend("q", prepare)
	require.NoError(t, err)
	b, err := l.Lend("q", prepare)
	require.NoError(t, err)
	require.Equal(t, 2, prepared, "a statement that is out is not lent twice")
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	require.Equal(t, 1, closed, "one statement a text is kept")
	require.Equal(t, 1, l.Kept())
	c, err := l.Lend("q", prepare)
	require.NoError(t, err)
	require.Equal(t, 2, prepared, "the kept one is lent again")
	require.NoError(t, c.Close())
	for i := range 3 {
		s, err := l.Lend(fmt.Sprintf("q%d", i), prepare)
		require.NoError(t, err)
		require.NoError(t, s.Close())
	}
	require.Equal(t, 2, l.Kept(), "no more than the bound is kept")
	l.Close()
	require.Equal(t, 0, l.Kept())
	require.Equal(t, prepared, closed, "every statement is closed once")
}

// OwnTransaction marks a context with its statement's name, and an
// unmarked context reads as none.
func TestOwnTransaction(t *testing.T) {
	ctx := context.Background()
	_, ok := OwnTransactionOf(ctx)
	require.False(t, ok)
	name, ok := OwnTransactionOf(OwnTransaction(ctx, "submit_one"))
	require.True(t, ok)
	require.Equal(t, "submit_one", name)
}

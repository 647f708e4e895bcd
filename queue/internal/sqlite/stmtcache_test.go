package sqlite

import (
	"context"
	"database/sql/driver"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	sqlitedriver "modernc.org/sqlite"
)

// countingConn counts the statements prepared and finalized on it.
type countingConn struct {
	driver.Conn
	prepared, finalized int
}

func (c *countingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	s, err := c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	c.prepared++
	return &countingStmt{Stmt: s, c: c}, nil
}

func (c *countingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (c *countingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
}

type countingStmt struct {
	driver.Stmt
	c *countingConn
}

func (s *countingStmt) Close() error { s.c.finalized++; return s.Stmt.Close() }

func (s *countingStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (s *countingStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	return s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
}

func newCounted(t *testing.T) (*cacheConn, *countingConn) {
	t.Helper()
	raw, err := (&sqlitedriver.Driver{}).Open(":memory:")
	require.NoError(t, err)
	counted := &countingConn{Conn: raw}
	return newCacheConn(counted), counted
}

func execStmt(t *testing.T, s driver.Stmt, args ...driver.NamedValue) {
	t.Helper()
	_, err := s.(driver.StmtExecContext).ExecContext(context.Background(), args)
	require.NoError(t, err)
}

func TestStatementCacheKeepsAClosedStatementForItsText(t *testing.T) {
	ctx := context.Background()
	c, counted := newCounted(t)
	_, err := c.ExecContext(ctx, "CREATE TABLE t (v INTEGER)", nil)
	require.NoError(t, err)

	const insert = "INSERT INTO t (v) VALUES (?)"
	for i := range 5 {
		s, err := c.PrepareContext(ctx, insert)
		require.NoError(t, err)
		execStmt(t, s, driver.NamedValue{Ordinal: 1, Value: int64(i)})
		require.NoError(t, s.Close())
	}
	require.Equal(t, 1, counted.prepared, "one compilation serves every later preparation of the same text")
	require.Zero(t, counted.finalized, "a closed statement is kept, not finalized")

	// Every execution ran: the cached statement is reset between uses.
	rows, err := c.QueryContext(ctx, "SELECT count(*), sum(v) FROM t", nil)
	require.NoError(t, err)
	dest := make([]driver.Value, 2)
	require.NoError(t, rows.Next(dest))
	require.NoError(t, rows.Close())
	require.Equal(t, []driver.Value{int64(5), int64(0 + 1 + 2 + 3 + 4)}, dest)

	require.NoError(t, c.Close())
	require.Equal(t, 1, counted.finalized, "closing the connection finalizes what it kept")
}

func TestStatementCacheLendsAStatementToOneUserAtATime(t *testing.T) {
	ctx := context.Background()
	c, counted := newCounted(t)
	const q = "SELECT 1"
	a, err := c.PrepareContext(ctx, q)
	require.NoError(t, err)
	b, err := c.PrepareContext(ctx, q) // a is still out
	require.NoError(t, err)
	require.Equal(t, 2, counted.prepared, "a statement in use is not lent twice")

	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	require.Equal(t, 1, counted.finalized, "one statement per text is kept; the other is finalized")
	d, err := c.PrepareContext(ctx, q)
	require.NoError(t, err)
	require.Equal(t, 2, counted.prepared, "the kept one is lent again")
	require.NoError(t, d.Close())
	require.NoError(t, c.Close())
	require.Equal(t, 2, counted.finalized)
}

func TestStatementCacheIsBounded(t *testing.T) {
	ctx := context.Background()
	c, counted := newCounted(t)
	for i := range stmtCacheMax + 10 {
		s, err := c.PrepareContext(ctx, fmt.Sprintf("SELECT %d", i))
		require.NoError(t, err)
		require.NoError(t, s.Close())
	}
	require.Equal(t, stmtCacheMax, c.stmts.Kept())
	require.Equal(t, 10, counted.finalized, "statements past the bound are finalized at once")
	require.NoError(t, c.Close())
	require.Equal(t, stmtCacheMax+10, counted.finalized)
}

package faults

import (
	"context"
	"database/sql/driver"
	"errors"
)

// The wrappers below implement every optional interface database/sql uses
// on a connection, a transaction and a statement of modernc.org/sqlite,
// and forward each to the wrapped value (falling back the way database/sql
// itself would when the wrapped value lacks one). Rows and results are
// returned unwrapped, with all their own optional interfaces.

var (
	_ driver.Driver             = (*Storage)(nil)
	_ driver.Conn               = (*conn)(nil)
	_ driver.ConnBeginTx        = (*conn)(nil)
	_ driver.ConnPrepareContext = (*conn)(nil)
	_ driver.ExecerContext      = (*conn)(nil)
	_ driver.QueryerContext     = (*conn)(nil)
	_ driver.NamedValueChecker  = (*conn)(nil)
	_ driver.SessionResetter    = (*conn)(nil)
	_ driver.Validator          = (*conn)(nil)
	_ driver.Pinger             = (*conn)(nil)
	_ driver.Tx                 = (*tx)(nil)
	_ driver.Stmt               = (*stmt)(nil)
	_ driver.StmtExecContext    = (*stmt)(nil)
	_ driver.StmtQueryContext   = (*stmt)(nil)
	_ driver.NamedValueChecker  = (*stmt)(nil)
	_ driver.ColumnConverter    = (*converterStmt)(nil)
)

// conn wraps one connection of the inner driver.
type conn struct {
	s     *Storage
	inner driver.Conn
}

// Unwrap returns the wrapped driver connection, for code that reaches
// driver-specific methods through sql.Conn.Raw.
func (c *conn) Unwrap() driver.Conn { return c.inner }

func (c *conn) Close() error { return c.inner.Close() }

func (c *conn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if err := c.s.check(opPrepare); err != nil {
		return nil, err
	}
	var si driver.Stmt
	var err error
	if p, ok := c.inner.(driver.ConnPrepareContext); ok {
		si, err = p.PrepareContext(ctx, query)
	} else {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		si, err = c.inner.Prepare(query)
	}
	if err != nil {
		return nil, err
	}
	return wrapStmt(c, si), nil
}

func (c *conn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if err := c.s.check(opBegin); err != nil {
		return nil, err
	}
	var ti driver.Tx
	var err error
	if b, ok := c.inner.(driver.ConnBeginTx); ok {
		ti, err = b.BeginTx(ctx, opts)
	} else {
		// As database/sql does for a driver without ConnBeginTx.
		if opts.Isolation != driver.IsolationLevel(0) {
			return nil, errors.New("sql: driver does not support non-default isolation level")
		}
		if opts.ReadOnly {
			return nil, errors.New("sql: driver does not support read-only transactions")
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ti, err = c.inner.Begin()
	}
	if err != nil {
		return nil, err
	}
	return &tx{s: c.s, inner: ti}, nil
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if e, ok := c.inner.(driver.ExecerContext); ok {
		if err := c.s.check(opStatement); err != nil {
			return nil, err
		}
		return e.ExecContext(ctx, query, args)
	}
	e, ok := c.inner.(driver.Execer)
	if !ok {
		return nil, driver.ErrSkip // database/sql prepares the statement instead
	}
	values, err := namedToValues(args)
	if err != nil {
		return nil, err
	}
	if err := c.s.check(opStatement); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return e.Exec(query, values)
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if q, ok := c.inner.(driver.QueryerContext); ok {
		if err := c.s.check(opStatement); err != nil {
			return nil, err
		}
		return q.QueryContext(ctx, query, args)
	}
	q, ok := c.inner.(driver.Queryer)
	if !ok {
		return nil, driver.ErrSkip // database/sql prepares the statement instead
	}
	values, err := namedToValues(args)
	if err != nil {
		return nil, err
	}
	if err := c.s.check(opStatement); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return q.Query(query, values)
}

// CheckNamedValue defers to the inner connection's checker; without one,
// ErrSkip sends database/sql down its default conversion, as if this
// connection had no checker either.
func (c *conn) CheckNamedValue(nv *driver.NamedValue) error {
	if n, ok := c.inner.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

// ResetSession is never failed: a refused reset would discard the
// connection, and with it an in-memory database.
func (c *conn) ResetSession(ctx context.Context) error {
	if r, ok := c.inner.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

// IsValid is never failed, for the same reason as ResetSession.
func (c *conn) IsValid() bool {
	if v, ok := c.inner.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *conn) Ping(ctx context.Context) error {
	if err := c.s.check(opPing); err != nil {
		return err
	}
	if p, ok := c.inner.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

// tx wraps one transaction.
type tx struct {
	s     *Storage
	inner driver.Tx
}

// Commit commits unless a fault says otherwise. A refused commit rolls the
// inner transaction back, so nothing of it is applied; an ambiguous one is
// committed and then reported as failed.
func (t *tx) Commit() error {
	ambiguous, refused := t.s.commitFault()
	if refused != nil {
		if err := t.inner.Rollback(); err != nil {
			return errors.Join(refused, err)
		}
		return refused
	}
	if err := t.inner.Commit(); err != nil {
		return err // a real failure: an ambiguous fault, if armed, is spent (and counted)
	}
	t.s.committed()
	if ambiguous != nil {
		return ambiguous
	}
	return nil
}

// Rollback is never refused.
func (t *tx) Rollback() error { return t.inner.Rollback() }

// stmt wraps one prepared statement.
type stmt struct {
	c     *conn
	inner driver.Stmt
}

// converterStmt is a stmt whose inner statement is a ColumnConverter.
// database/sql treats a ColumnConverter differently from a statement
// without one, so the wrapper has one only when the inner statement does.
type converterStmt struct{ *stmt }

func (s converterStmt) ColumnConverter(idx int) driver.ValueConverter {
	return s.inner.(driver.ColumnConverter).ColumnConverter(idx)
}

func wrapStmt(c *conn, si driver.Stmt) driver.Stmt {
	s := &stmt{c: c, inner: si}
	if _, ok := si.(driver.ColumnConverter); ok {
		return converterStmt{s}
	}
	return s
}

func (s *stmt) Close() error  { return s.inner.Close() }
func (s *stmt) NumInput() int { return s.inner.NumInput() }

func (s *stmt) Exec(args []driver.Value) (driver.Result, error) {
	if err := s.c.s.check(opStatement); err != nil {
		return nil, err
	}
	return s.inner.Exec(args)
}

func (s *stmt) Query(args []driver.Value) (driver.Rows, error) {
	if err := s.c.s.check(opStatement); err != nil {
		return nil, err
	}
	return s.inner.Query(args)
}

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	if err := s.c.s.check(opStatement); err != nil {
		return nil, err
	}
	if e, ok := s.inner.(driver.StmtExecContext); ok {
		return e.ExecContext(ctx, args)
	}
	values, err := namedToValues(args)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.inner.Exec(values)
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	if err := s.c.s.check(opStatement); err != nil {
		return nil, err
	}
	if q, ok := s.inner.(driver.StmtQueryContext); ok {
		return q.QueryContext(ctx, args)
	}
	values, err := namedToValues(args)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.inner.Query(values)
}

// CheckNamedValue defers to the inner statement's checker, then the inner
// connection's, as database/sql looks for them; without either, ErrSkip
// sends database/sql down the route it takes for a driver without one.
func (s *stmt) CheckNamedValue(nv *driver.NamedValue) error {
	if n, ok := s.inner.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return s.c.CheckNamedValue(nv)
}

// namedToValues drops the names, refusing named arguments, as database/sql
// does for a statement without StmtExecContext or StmtQueryContext.
func namedToValues(named []driver.NamedValue) ([]driver.Value, error) {
	values := make([]driver.Value, len(named))
	for i, nv := range named {
		if nv.Name != "" {
			return nil, errors.New("sql: driver does not support the use of Named Parameters")
		}
		values[i] = nv.Value
	}
	return values, nil
}

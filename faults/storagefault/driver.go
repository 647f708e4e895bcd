package storagefault

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
)

// The wrappers below implement every optional interface database/sql uses
// on a connection, a transaction and a statement of modernc.org/sqlite,
// and forward each to the wrapped value. They do not emulate what
// database/sql does for a driver without those interfaces: Open refuses a
// connection that lacks one (innerConn) and Prepare a statement that lacks
// one (innerStmt). Rows and results are returned unwrapped, with all their
// own optional interfaces. Neither the driver nor its connections check
// named values (driver.NamedValueChecker), so neither do the wrappers:
// database/sql converts arguments as it would for the raw driver.

var (
	_ driver.Driver             = (*Storage)(nil)
	_ driver.Conn               = (*conn)(nil)
	_ driver.ConnBeginTx        = (*conn)(nil)
	_ driver.ConnPrepareContext = (*conn)(nil)
	_ driver.ExecerContext      = (*conn)(nil)
	_ driver.QueryerContext     = (*conn)(nil)
	_ driver.SessionResetter    = (*conn)(nil)
	_ driver.Validator          = (*conn)(nil)
	_ driver.Pinger             = (*conn)(nil)
	_ driver.Tx                 = (*tx)(nil)
	_ driver.Stmt               = (*stmt)(nil)
	_ driver.StmtExecContext    = (*stmt)(nil)
	_ driver.StmtQueryContext   = (*stmt)(nil)
)

// innerConn is what Storage needs of a wrapped driver's connection.
type innerConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.SessionResetter
	driver.Validator
	driver.Pinger
}

// innerStmt is what Storage needs of a wrapped driver's statement.
type innerStmt interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
}

// ErrDriverUnsupported is returned by Storage's Open for a connection, and
// by a connection's Prepare for a statement, of the wrapped driver that
// lacks an interface the wrapper forwards to (see innerConn and innerStmt:
// the context-aware interfaces modernc.org/sqlite implements).
var ErrDriverUnsupported = errors.New("faults: wrapped driver lacks an interface Storage needs")

// conn wraps one connection of the inner driver.
type conn struct {
	s     *Storage
	inner innerConn
}

// wrapConn wraps c, or closes it and refuses it if it lacks an interface.
func wrapConn(s *Storage, c driver.Conn) (*conn, error) {
	ic, ok := c.(innerConn)
	if !ok {
		return nil, errors.Join(fmt.Errorf("%w: connection %T needs ConnBeginTx, ConnPrepareContext, "+
			"ExecerContext, QueryerContext, SessionResetter, Validator and Pinger", ErrDriverUnsupported, c), c.Close())
	}
	return &conn{s: s, inner: ic}, nil
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
	si, err := c.inner.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	is, ok := si.(innerStmt)
	if !ok {
		return nil, errors.Join(fmt.Errorf("%w: statement %T needs StmtExecContext and StmtQueryContext",
			ErrDriverUnsupported, si), si.Close())
	}
	return &stmt{c: c, inner: is}, nil
}

func (c *conn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if err := c.s.check(opBegin); err != nil {
		return nil, err
	}
	ti, err := c.inner.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &tx{s: c.s, inner: ti}, nil
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if err := c.s.check(opStatement); err != nil {
		return nil, err
	}
	return c.inner.ExecContext(ctx, query, args)
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if err := c.s.check(opStatement); err != nil {
		return nil, err
	}
	return c.inner.QueryContext(ctx, query, args)
}

// ResetSession is never failed: a refused reset would discard the
// connection, and with it an in-memory database.
func (c *conn) ResetSession(ctx context.Context) error { return c.inner.ResetSession(ctx) }

// IsValid is never failed, for the same reason as ResetSession.
func (c *conn) IsValid() bool { return c.inner.IsValid() }

func (c *conn) Ping(ctx context.Context) error {
	if err := c.s.check(opPing); err != nil {
		return err
	}
	return c.inner.Ping(ctx)
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
	inner innerStmt
}

func (s *stmt) Close() error  { return s.inner.Close() }
func (s *stmt) NumInput() int { return s.inner.NumInput() }

// Exec and Query are driver.Stmt's; database/sql calls the context
// variants, which the wrapped statement has.
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
	return s.inner.ExecContext(ctx, args)
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	if err := s.c.s.check(opStatement); err != nil {
		return nil, err
	}
	return s.inner.QueryContext(ctx, args)
}

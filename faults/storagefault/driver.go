package storagefault

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"

	"github.com/leasehold/leasehold/internal/sqlconn"
)

// The wrappers below implement every optional interface database/sql uses
// on a connection, a transaction and a statement of modernc.org/sqlite and
// of pgx, and forward each to the wrapped value; the store's dialect
// supplies the errors the faults inject. They do not emulate what
// database/sql does for a driver without those interfaces: Open refuses a
// connection that lacks one (innerConn, and what the dialect adds) and
// Prepare a statement that lacks one (innerStmt). Rows and results are
// returned unwrapped, with all their own optional interfaces. A connection
// that checks named values (pgx's) checks them through the wrapper; for
// one that does not (SQLite's) the wrapper answers driver.ErrSkip, and
// database/sql converts arguments as it would for the raw driver.
//
// A fault whose Error has dropsConn (only PostgreSQL's) ends the
// connection as a lost one: its open transaction is rolled back, it is
// closed, every later operation but a rollback or a close fails, and it
// tells database/sql it is no longer valid.

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
	_ driver.NamedValueChecker  = (*conn)(nil)
	_ driver.Tx                 = (*tx)(nil)
	_ driver.Stmt               = (*stmt)(nil)
	_ driver.StmtExecContext    = (*stmt)(nil)
	_ driver.StmtQueryContext   = (*stmt)(nil)
)

// innerConn is what Storage needs of a wrapped driver's connection, in
// every dialect; a dialect may need more (see dialect.accepts).
type innerConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.SessionResetter
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
// the context-aware interfaces modernc.org/sqlite and pgx implement).
var ErrDriverUnsupported = errors.New("faults: wrapped driver lacks an interface Storage needs")

// conn wraps one connection of the inner driver. It is used by one
// goroutine at a time, as database/sql uses a connection.
type conn struct {
	sqlconn.Conn // Unwrap and CheckNamedValue, as they are
	s            *Storage
	inner        innerConn
	tx           driver.Tx // the transaction open on the connection, nil if none
	lost         bool      // a fault ended the connection
}

// wrapConn wraps c, or closes it and refuses it if it lacks an interface.
func wrapConn(s *Storage, c driver.Conn) (*conn, error) {
	ic, ok := c.(innerConn)
	if !ok || !s.dialect.accepts(c) {
		return nil, errors.Join(fmt.Errorf("%w: connection %T needs %s", ErrDriverUnsupported, c, s.dialect.connNeeds()), c.Close())
	}
	return &conn{Conn: sqlconn.Conn{Inner: ic}, s: s, inner: ic}, nil
}

// check decides an operation of kind op: nil to run it, else the injected
// error, after ending the connection when the fault does. A connection a
// fault has ended fails every operation but a rollback or a close.
func (c *conn) check(op storageOp) error {
	if c.lost {
		return c.s.dialect.connClosedError(op)
	}
	err := c.s.check(op)
	if err == nil {
		return nil
	}
	var fe *Error
	if errors.As(err, &fe) && fe.dropsConn {
		c.drop()
	}
	return err
}

// drop ends the connection as a lost one: its transaction rolled back on
// the server first, then the connection closed. Errors from either are
// dropped with it: the connection is gone either way.
func (c *conn) drop() {
	if c.tx != nil {
		_ = c.tx.Rollback()
		c.tx = nil
	}
	_ = c.inner.Close()
	c.lost = true
}

func (c *conn) Close() error {
	if c.lost {
		return nil
	}
	return c.inner.Close()
}

func (c *conn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if err := c.check(opPrepare); err != nil {
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
	if err := c.check(opBegin); err != nil {
		return nil, err
	}
	ti, err := c.inner.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	c.tx = ti
	return &tx{c: c, inner: ti}, nil
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if name, ok := c.ownTransaction(ctx); ok {
		return runOwn(c, name, func() (driver.Result, error) { return c.inner.ExecContext(ctx, query, args) }, drainResult)
	}
	if err := c.check(opStatement); err != nil {
		return nil, err
	}
	return c.inner.ExecContext(ctx, query, args)
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if name, ok := c.ownTransaction(ctx); ok {
		return runOwn(c, name, func() (driver.Rows, error) { return c.inner.QueryContext(ctx, query, args) }, drainRows)
	}
	if err := c.check(opStatement); err != nil {
		return nil, err
	}
	return c.inner.QueryContext(ctx, query, args)
}

// ownTransaction returns the name of a statement marked as its own
// transaction (sqlconn.OwnTransaction) that runs outside one: inside a
// transaction, a marked statement is one statement of it.
func (c *conn) ownTransaction(ctx context.Context) (string, bool) {
	if c.tx != nil {
		return "", false
	}
	return sqlconn.OwnTransactionOf(ctx)
}

// runOwn runs a statement that is its own transaction, named name, with
// the faults of a transaction's BEGIN, statements and COMMIT landing on
// it in that order (each fault counted for the statement too; see
// Storage.StatementCounts):
//
//   - at its BEGIN (FailBegin, Busy, an outage): as at a transaction's;
//     the statement is not run;
//   - at the statement (FailStatement): the connection is lost in the
//     middle of it: on the server it runs, inside a transaction rolled
//     back when the connection ends, so it takes its locks and draws its
//     sequences' values and leaves nothing else;
//   - at its COMMIT: a refused commit (FailCommit, a full disk) is the
//     statement run and rolled back, its error returned; an outage ends
//     the connection unrun; an AmbiguousCommit runs it to its end (its
//     commit), then ends the connection before the reply, so the caller
//     gets the error and none of its rows.
//
// A statement that runs unfaulted counts as a commit (Storage.Commits).
// drain reads a run's rows or result to the end, which for a statement
// outside a transaction is where the server commits it.
func runOwn[T any](c *conn, name string, run func() (T, error), drain func(T) error) (T, error) {
	var zero T
	if c.lost {
		return zero, c.s.dialect.connClosedError(opStatement)
	}
	for _, op := range []storageOp{opBegin, opStatement} {
		err := c.s.checkOwn(op, name)
		if err == nil {
			continue
		}
		var fe *Error
		if errors.As(err, &fe) && fe.Fault == string(FailStatement) {
			c.runRolledBack(func() error { return runDrained(run, drain) })
		}
		if fe != nil && fe.dropsConn {
			c.drop()
		}
		return zero, err
	}
	ambiguous, refused := c.s.commitFaultOwn(name)
	switch {
	case refused != nil && refused.dropsConn:
		c.drop()
		return zero, refused
	case refused != nil:
		c.runRolledBack(func() error { return runDrained(run, drain) })
		return zero, refused
	case ambiguous != nil:
		if err := runDrained(run, drain); err != nil {
			return zero, err // a real failure: the fault is spent (and counted)
		}
		c.s.committed()
		if ambiguous.dropsConn {
			c.drop()
		}
		return zero, ambiguous
	}
	res, err := run()
	if err == nil {
		c.s.committed()
	}
	return res, err
}

// runDrained runs a statement and reads it to its end.
func runDrained[T any](run func() (T, error), drain func(T) error) error {
	res, err := run()
	if err != nil {
		return err
	}
	return drain(res)
}

// runRolledBack runs fn inside a transaction of the wrapped connection and
// rolls it back: what the server does with a statement whose transaction
// ends unapplied. Its errors are the rolled-back statement's, and dropped
// with it.
func (c *conn) runRolledBack(fn func() error) {
	t, err := c.inner.BeginTx(context.Background(), driver.TxOptions{})
	if err != nil {
		return
	}
	_ = fn()
	_ = t.Rollback()
}

// drainRows reads rows to the end and closes them.
func drainRows(rows driver.Rows) error {
	dest := make([]driver.Value, len(rows.Columns()))
	for {
		err := rows.Next(dest)
		if errors.Is(err, io.EOF) {
			return rows.Close()
		}
		if err != nil {
			return errors.Join(err, rows.Close())
		}
	}
}

// drainResult: a result is read to its end when it is returned.
func drainResult(driver.Result) error { return nil }

// ResetSession is never failed by a fault itself: a refused reset would
// discard the connection, and with it an in-memory database. It tells
// database/sql to discard a connection a fault ended.
func (c *conn) ResetSession(ctx context.Context) error {
	if c.lost {
		return driver.ErrBadConn
	}
	return c.inner.ResetSession(ctx)
}

// IsValid reports false for a connection a fault ended, so that
// database/sql does not put it back in the pool; it is never failed
// otherwise, for the same reason as ResetSession.
func (c *conn) IsValid() bool {
	if c.lost {
		return false
	}
	if v, ok := c.inner.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *conn) Ping(ctx context.Context) error {
	if err := c.check(opPing); err != nil {
		return err
	}
	return c.inner.Ping(ctx)
}

// tx wraps one transaction of a conn.
type tx struct {
	c     *conn
	inner driver.Tx
}

// Commit commits unless a fault says otherwise. A refused commit rolls the
// transaction back, so nothing of it is applied (ending the connection
// first when the fault does); an ambiguous one is committed and then
// reported as failed (the connection lost before the reply when the fault
// ends it).
func (t *tx) Commit() error {
	c := t.c
	if c.lost {
		return c.s.dialect.connClosedError(opCommit)
	}
	ambiguous, refused := c.s.commitFault()
	if refused != nil {
		if refused.dropsConn {
			c.drop()
			return refused
		}
		c.tx = nil
		if err := t.inner.Rollback(); err != nil {
			return errors.Join(refused, err)
		}
		return refused
	}
	c.tx = nil
	if err := t.inner.Commit(); err != nil {
		return err // a real failure: an ambiguous fault, if armed, is spent (and counted)
	}
	c.s.committed()
	if ambiguous != nil {
		if ambiguous.dropsConn {
			c.drop()
		}
		return ambiguous
	}
	return nil
}

// Rollback is never refused. On a connection a fault ended there is
// nothing left to roll back: the transaction ended with it.
func (t *tx) Rollback() error {
	if t.c.lost {
		return nil
	}
	t.c.tx = nil
	return t.inner.Rollback()
}

// stmt wraps one prepared statement of a conn.
type stmt struct {
	c     *conn
	inner innerStmt
}

func (s *stmt) Close() error {
	if s.c.lost {
		return nil
	}
	return s.inner.Close()
}

func (s *stmt) NumInput() int { return s.inner.NumInput() }

// Exec and Query are driver.Stmt's; database/sql calls the context
// variants, which the wrapped statement has.
func (s *stmt) Exec(args []driver.Value) (driver.Result, error) {
	if err := s.c.check(opStatement); err != nil {
		return nil, err
	}
	return s.inner.Exec(args)
}

func (s *stmt) Query(args []driver.Value) (driver.Rows, error) {
	if err := s.c.check(opStatement); err != nil {
		return nil, err
	}
	return s.inner.Query(args)
}

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	if name, ok := s.c.ownTransaction(ctx); ok {
		return runOwn(s.c, name, func() (driver.Result, error) { return s.inner.ExecContext(ctx, args) }, drainResult)
	}
	if err := s.c.check(opStatement); err != nil {
		return nil, err
	}
	return s.inner.ExecContext(ctx, args)
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	if name, ok := s.c.ownTransaction(ctx); ok {
		return runOwn(s.c, name, func() (driver.Rows, error) { return s.inner.QueryContext(ctx, args) }, drainRows)
	}
	if err := s.c.check(opStatement); err != nil {
		return nil, err
	}
	return s.inner.QueryContext(ctx, args)
}

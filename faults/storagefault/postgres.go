package storagefault

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/jonboulle/clockwork"
)

// NewPostgres wraps inner, pgx's database/sql driver
// (stdlib.GetDefaultDriver()), with the same fault plan as NewStorage, but
// every fault reads as what a PostgreSQL server and its connections do
// (each error's SQLState is the SQLSTATE the server would send):
//
//   - an outage window: a connection cannot be opened (57P03, the server
//     is not accepting connections), and an operation on an open one ends
//     it (57P01, the server is shutting down);
//   - FailBegin and FailStatement: the connection is lost (08006) at the
//     BEGIN or at the statement; an open transaction is rolled back, as
//     the server rolls back the transaction of a connection that ends;
//   - FailCommit: the server answers the COMMIT with a serialization
//     failure (40001) and the transaction is rolled back, as under a
//     server whose default isolation is serializable;
//   - AmbiguousCommit: the COMMIT is applied and the connection is lost
//     before its reply arrives (08006), so the caller cannot tell;
//   - Busy: the BEGIN waits past the lock timeout (55P03);
//   - a full disk (SetDiskFull): the COMMIT fails for want of space
//     (53100) and the transaction is rolled back.
//
// A lost connection is closed, and it tells database/sql it is no longer
// valid, so the pool opens a new one for the next operation. Before it is
// closed its open transaction is rolled back on the server, so that no row
// or advisory lock of it outlives the error: a claim right after the fault
// (FOR UPDATE SKIP LOCKED) finds the rows as a claim after a real loss
// finds them once the server has noticed it, whatever the timing.
//
// The wrapped driver's connections must have the context-aware interfaces
// and driver.NamedValueChecker (pgx's do: it binds arrays such as []string
// itself); others are refused with ErrDriverUnsupported.
func NewPostgres(inner driver.Driver, clock clockwork.Clock) *Storage {
	s := NewStorage(inner, clock)
	s.postgres = true
	return s
}

var (
	_ driver.Conn               = (*pgConn)(nil)
	_ driver.ConnBeginTx        = (*pgConn)(nil)
	_ driver.ConnPrepareContext = (*pgConn)(nil)
	_ driver.ExecerContext      = (*pgConn)(nil)
	_ driver.QueryerContext     = (*pgConn)(nil)
	_ driver.SessionResetter    = (*pgConn)(nil)
	_ driver.Validator          = (*pgConn)(nil)
	_ driver.Pinger             = (*pgConn)(nil)
	_ driver.NamedValueChecker  = (*pgConn)(nil)
	_ driver.Tx                 = (*pgTx)(nil)
	_ driver.StmtExecContext    = (*pgStmt)(nil)
	_ driver.StmtQueryContext   = (*pgStmt)(nil)
)

// innerPgConn is what a PostgreSQL Storage needs of a wrapped connection.
type innerPgConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.SessionResetter
	driver.Pinger
	driver.NamedValueChecker
}

// pgConn wraps one pgx connection. It is used by one goroutine at a time,
// as database/sql uses a connection.
type pgConn struct {
	s     *Storage
	inner innerPgConn
	tx    driver.Tx // the transaction open on the connection, nil if none
	lost  bool      // a fault ended the connection
}

func wrapPgConn(s *Storage, c driver.Conn) (*pgConn, error) {
	ic, ok := c.(innerPgConn)
	if !ok {
		return nil, errors.Join(fmt.Errorf("%w: connection %T needs ConnBeginTx, ConnPrepareContext, "+
			"ExecerContext, QueryerContext, SessionResetter, Pinger and NamedValueChecker", ErrDriverUnsupported, c), c.Close())
	}
	return &pgConn{s: s, inner: ic}, nil
}

// check decides an operation of kind op: nil to run it, else the injected
// error, after ending the connection when the fault does. A connection a
// fault has ended fails every operation but a rollback or a close.
func (c *pgConn) check(op storageOp) error {
	if c.lost {
		return pgConnClosedError(op)
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
func (c *pgConn) drop() {
	if c.tx != nil {
		_ = c.tx.Rollback()
		c.tx = nil
	}
	_ = c.inner.Close()
	c.lost = true
}

// Unwrap returns the wrapped driver connection.
func (c *pgConn) Unwrap() driver.Conn { return c.inner }

func (c *pgConn) Close() error {
	if c.lost {
		return nil
	}
	return c.inner.Close()
}

// CheckNamedValue lets pgx bind every argument as it binds them itself.
func (c *pgConn) CheckNamedValue(v *driver.NamedValue) error { return c.inner.CheckNamedValue(v) }

func (c *pgConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *pgConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
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
	return &pgStmt{c: c, inner: is}, nil
}

func (c *pgConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *pgConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if err := c.check(opBegin); err != nil {
		return nil, err
	}
	ti, err := c.inner.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	c.tx = ti
	return &pgTx{c: c, inner: ti}, nil
}

func (c *pgConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if err := c.check(opStatement); err != nil {
		return nil, err
	}
	return c.inner.ExecContext(ctx, query, args)
}

func (c *pgConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if err := c.check(opStatement); err != nil {
		return nil, err
	}
	return c.inner.QueryContext(ctx, query, args)
}

// ResetSession tells database/sql to discard a connection a fault ended.
func (c *pgConn) ResetSession(ctx context.Context) error {
	if c.lost {
		return driver.ErrBadConn
	}
	return c.inner.ResetSession(ctx)
}

// IsValid reports false for a connection a fault ended, so that database/sql
// does not put it back in the pool.
func (c *pgConn) IsValid() bool {
	if c.lost {
		return false
	}
	if v, ok := c.inner.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *pgConn) Ping(ctx context.Context) error {
	if err := c.check(opPing); err != nil {
		return err
	}
	return c.inner.Ping(ctx)
}

// pgTx wraps one transaction of a pgConn.
type pgTx struct {
	c     *pgConn
	inner driver.Tx
}

// Commit commits unless a fault says otherwise: a refused commit rolls the
// transaction back (ending the connection first when the fault does); an
// ambiguous one is committed, and then the connection is lost before the
// reply.
func (t *pgTx) Commit() error {
	c := t.c
	if c.lost {
		return pgConnClosedError(opCommit)
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
		return err
	}
	c.s.committed()
	if ambiguous != nil {
		c.drop()
		return ambiguous
	}
	return nil
}

// Rollback is never refused. On a connection a fault ended there is
// nothing left to roll back: the transaction ended with it.
func (t *pgTx) Rollback() error {
	if t.c.lost {
		return nil
	}
	t.c.tx = nil
	return t.inner.Rollback()
}

// pgStmt wraps one prepared statement of a pgConn.
type pgStmt struct {
	c     *pgConn
	inner innerStmt
}

func (s *pgStmt) Close() error {
	if s.c.lost {
		return nil
	}
	return s.inner.Close()
}

func (s *pgStmt) NumInput() int { return s.inner.NumInput() }

func (s *pgStmt) Exec(args []driver.Value) (driver.Result, error) {
	if err := s.c.check(opStatement); err != nil {
		return nil, err
	}
	return s.inner.Exec(args)
}

func (s *pgStmt) Query(args []driver.Value) (driver.Rows, error) {
	if err := s.c.check(opStatement); err != nil {
		return nil, err
	}
	return s.inner.Query(args)
}

func (s *pgStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	if err := s.c.check(opStatement); err != nil {
		return nil, err
	}
	return s.inner.ExecContext(ctx, args)
}

func (s *pgStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	if err := s.c.check(opStatement); err != nil {
		return nil, err
	}
	return s.inner.QueryContext(ctx, args)
}

// The SQLSTATEs the PostgreSQL faults read as.
const (
	stateCannotConnectNow    = "57P03"
	stateAdminShutdown       = "57P01"
	stateConnectionFailure   = "08006"
	stateConnectionNotExists = "08003"
	stateSerialization       = "40001"
	stateLockNotAvailable    = "55P03"
	stateDiskFull            = "53100"
)

// pgError is an injected error that reads as a server's: severity, message
// and SQLSTATE, as pgx renders a *pgconn.PgError.
func pgError(fault string, op storageOp, severity, message, state string, drops bool) *Error {
	return &Error{Fault: fault, Op: string(op), Description: fmt.Sprintf("%s: %s (SQLSTATE %s)", severity, message, state),
		sqlState: state, dropsConn: drops}
}

func pgUnavailableError(op storageOp) *Error {
	if op == opOpen {
		return pgError(faultUnavailable, op, "FATAL", "the database system is not accepting connections", stateCannotConnectNow, false)
	}
	return pgError(faultUnavailable, op, "FATAL", "terminating connection due to administrator command", stateAdminShutdown, true)
}

func pgDiskFullError() *Error {
	return pgError(faultDiskFull, opCommit, "ERROR", "could not extend file: No space left on device", stateDiskFull, false)
}

// pgConnClosedError is what an operation on a connection a fault ended
// gets. It is no new fault: the one that ended the connection was counted.
func pgConnClosedError(op storageOp) *Error {
	return pgError("connection_lost", op, "FATAL", "the connection was lost", stateConnectionNotExists, false)
}

func pgFaultError(f Fault) *Error {
	switch f {
	case FailBegin, FailStatement:
		return pgError(string(f), f.op(), "FATAL", "server closed the connection unexpectedly", stateConnectionFailure, true)
	case FailCommit:
		return pgError(string(f), f.op(), "ERROR", "could not serialize access due to read/write dependencies among transactions",
			stateSerialization, false)
	case AmbiguousCommit:
		return pgError(string(f), f.op(), "FATAL", "server closed the connection unexpectedly after the commit was sent",
			stateConnectionFailure, true)
	case Busy:
		return pgError(string(f), f.op(), "ERROR", "canceling statement due to lock timeout", stateLockNotAvailable, false)
	}
	panic(fmt.Sprintf("faults: unknown storage fault %q", string(f)))
}

package storagefault

import (
	"database/sql/driver"
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
	s.dialect = postgresDialect{}
	return s
}

// postgresDialect is NewPostgres's: every fault reads as what a
// PostgreSQL server and its connections do, with the server's SQLSTATE
// (see Error.SQLState); a lost connection's faults end it (dropsConn).
type postgresDialect struct{}

// accepts asks for driver.NamedValueChecker too: pgx binds arguments such
// as []string itself, which database/sql's default conversion refuses.
func (postgresDialect) accepts(c driver.Conn) bool {
	_, ok := c.(driver.NamedValueChecker)
	return ok
}

func (postgresDialect) connNeeds() string {
	return "ConnBeginTx, ConnPrepareContext, ExecerContext, QueryerContext, SessionResetter, Pinger and NamedValueChecker"
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

func (postgresDialect) unavailableError(op storageOp) *Error {
	if op == opOpen {
		return pgError(faultUnavailable, op, "FATAL", "the database system is not accepting connections", stateCannotConnectNow, false)
	}
	return pgError(faultUnavailable, op, "FATAL", "terminating connection due to administrator command", stateAdminShutdown, true)
}

func (postgresDialect) diskFullError() *Error {
	return pgError(faultDiskFull, opCommit, "ERROR", "could not extend file: No space left on device", stateDiskFull, false)
}

// connClosedError is what an operation on a connection a fault ended
// gets. It is no new fault: the one that ended the connection was counted.
func (postgresDialect) connClosedError(op storageOp) *Error {
	return pgError("connection_lost", op, "FATAL", "the connection was lost", stateConnectionNotExists, false)
}

func (postgresDialect) faultError(f Fault) *Error {
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

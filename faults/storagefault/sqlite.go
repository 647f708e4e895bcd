package storagefault

import "database/sql/driver"

// sqliteDialect is NewStorage's: every fault reads as what
// modernc.org/sqlite returns, with SQLite's result code (see Error.Code).
// No SQLite fault ends the connection.
type sqliteDialect struct{}

// SQLite's primary result codes that the injected errors read as (see
// Error.Code).
const (
	codeBusy     = 5
	codeIOErr    = 10
	codeFull     = 13
	codeCantOpen = 14
)

func (sqliteDialect) unavailableError(op storageOp) *Error {
	return &Error{Fault: faultUnavailable, Op: string(op), Description: "storage unavailable", code: codeCantOpen}
}

func (sqliteDialect) diskFullError() *Error {
	return &Error{Fault: faultDiskFull, Op: string(opCommit), Description: "database or disk is full (13) (SQLITE_FULL)", code: codeFull}
}

func (sqliteDialect) faultError(f Fault) *Error {
	e := &Error{Fault: string(f), Op: string(f.op()), code: codeIOErr}
	switch f {
	case FailBegin:
		e.Description = "cannot begin transaction"
	case Busy:
		e.Description = "database is locked (5) (SQLITE_BUSY)"
		e.code = codeBusy
	case FailStatement:
		e.Description = "disk I/O error (10) (SQLITE_IOERR)"
	case FailCommit:
		e.Description = "commit failed; transaction rolled back"
	case AmbiguousCommit:
		e.Description = "disk I/O error (10) (SQLITE_IOERR) reporting commit outcome"
	}
	return e
}

// connClosedError is never reached with SQLite, whose faults end no
// connection; it reads as an I/O error should that change.
func (sqliteDialect) connClosedError(op storageOp) *Error {
	return &Error{Fault: "connection_lost", Op: string(op), Description: "the connection was lost", code: codeIOErr}
}

// accepts asks for driver.Validator too: modernc.org/sqlite has it, and
// the wrapper forwards IsValid.
func (sqliteDialect) accepts(c driver.Conn) bool {
	_, ok := c.(driver.Validator)
	return ok
}

func (sqliteDialect) connNeeds() string {
	return "ConnBeginTx, ConnPrepareContext, ExecerContext, QueryerContext, SessionResetter, Validator and Pinger"
}

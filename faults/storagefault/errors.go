package storagefault

import "errors"

// ErrInjected is wrapped by every error an injector makes up, this
// package's and package faults' alike, so a test or the simulator can tell
// an injected failure from a real one with errors.Is(err, ErrInjected).
var ErrInjected = errors.New("faults: injected fault")

// Error is an injected error. Its message names the operation it hit and
// the fault, and it wraps ErrInjected (and, for some faults, the sentinel
// the real failure would carry, such as worker.ErrUnavailable).
type Error struct {
	// Fault names what was injected (a Fault, "unavailable",
	// "lost_response", ...).
	Fault string
	// Op names the operation that failed ("begin", "exec", "commit",
	// "call op-...").
	Op string
	// Description is what the failure reads as, without the fault's name.
	Description string
	// Also is a sentinel the error wraps besides ErrInjected; nil for none.
	Also error
	// TimedOut makes the error read as a timeout (see Timeout).
	TimedOut bool

	code int // the SQLite result code a storage fault reads as; 0 for others
	// sqlState is the SQLSTATE a PostgreSQL storage fault reads as; ""
	// for others. dropsConn says the fault also ends the connection.
	sqlState  string
	dropsConn bool
}

// Error renders "<op>: <description> (faults: injected <fault>)".
func (e *Error) Error() string {
	return e.Op + ": " + e.Description + " (faults: injected " + e.Fault + ")"
}

// Unwrap returns ErrInjected and any sentinel the fault also carries.
func (e *Error) Unwrap() []error {
	if e.Also != nil {
		return []error{ErrInjected, e.Also}
	}
	return []error{ErrInjected}
}

// Timeout reports whether the error reads as a timeout (a lost response),
// in the manner of net.Error.
func (e *Error) Timeout() bool { return e.TimedOut }

// Code returns the SQLite result code a storage fault reads as (5 busy, 10
// I/O error, 13 disk full, 14 cannot open), as modernc.org/sqlite's errors
// report theirs, so that code classifying storage errors by their code
// treats an injected one as the real failure; 0 for faults that are not
// storage faults.
func (e *Error) Code() int { return e.code }

// SQLState returns the SQLSTATE a PostgreSQL storage fault reads as (see
// NewPostgres), as pgx's *pgconn.PgError reports a server's, so that code
// classifying PostgreSQL errors by their SQLSTATE treats an injected one
// as the real failure; "" for every other fault.
func (e *Error) SQLState() string { return e.sqlState }

package storagefault

import (
	"database/sql/driver"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// Fault is a one-shot fault a Storage can be armed with. Each fault
// hits one kind of operation: a begin, a statement or a commit.
type Fault string

// The storage faults.
const (
	// FailBegin: the next Begin fails; no transaction is opened.
	FailBegin Fault = "fail_begin"
	// FailStatement: the next statement (exec or query, in or out of a
	// transaction) fails with what reads as a disk I/O error and is not
	// run.
	FailStatement Fault = "fail_statement"
	// FailCommit: the next Commit rolls the transaction back and reports
	// failure; nothing of it is applied.
	FailCommit Fault = "fail_commit"
	// AmbiguousCommit: the next Commit is applied, then reports failure,
	// so the caller cannot tell that it succeeded.
	AmbiguousCommit Fault = "ambiguous_commit"
	// Busy: the next Begin fails with what reads as SQLITE_BUSY
	// ("database is locked"), as under busy_timeout=0 with another writer.
	Busy Fault = "busy"
)

// Faults lists every storage fault.
func Faults() []Fault {
	return []Fault{FailBegin, FailStatement, FailCommit, AmbiguousCommit, Busy}
}

// ParseFault returns the storage fault named name.
func ParseFault(name string) (Fault, error) {
	for _, f := range Faults() {
		if string(f) == name {
			return f, nil
		}
	}
	return "", fmt.Errorf("faults: unknown storage fault %q (want one of %v)", name, Faults())
}

// String returns the fault's name.
func (f Fault) String() string { return string(f) }

// storageOp is the kind of operation a storage fault hits.
type storageOp string

const (
	opOpen      storageOp = "open"
	opPrepare   storageOp = "prepare"
	opPing      storageOp = "ping"
	opBegin     storageOp = "begin"
	opStatement storageOp = "statement"
	opCommit    storageOp = "commit"
)

func (f Fault) op() storageOp {
	switch f {
	case FailBegin, Busy:
		return opBegin
	case FailStatement:
		return opStatement
	case FailCommit, AmbiguousCommit:
		return opCommit
	}
	panic(fmt.Sprintf("faults: unknown storage fault %q", string(f)))
}

// faultUnavailable names the outage window's refusals.
const faultUnavailable = "unavailable"

// Counts counts the storage faults that have fired.
type Counts struct {
	// Unavailable counts operations refused inside an outage window.
	Unavailable int
	// DiskFull counts commits refused while the disk is full (SetDiskFull).
	DiskFull        int
	FailBegin       int
	FailStatement   int
	FailCommit      int
	AmbiguousCommit int
	Busy            int
}

// counter returns the field of c that counts armed fault f, or nil for a
// fault that is not one of Faults.
func (c *Counts) counter(f Fault) *int {
	switch f {
	case FailBegin:
		return &c.FailBegin
	case FailStatement:
		return &c.FailStatement
	case FailCommit:
		return &c.FailCommit
	case AmbiguousCommit:
		return &c.AmbiguousCommit
	case Busy:
		return &c.Busy
	}
	return nil
}

// Fired returns the count of armed fault f that has fired (0 for a fault
// that is not one of Faults).
func (c Counts) Fired(f Fault) int {
	if n := c.counter(f); n != nil {
		return *n
	}
	return 0
}

// add counts f, which Arm has checked is one of Faults.
func (c *Counts) add(f Fault) { *c.counter(f)++ }

// Total is the number of faults fired, refusals included.
func (c Counts) Total() int {
	return c.Unavailable + c.DiskFull + c.FailBegin + c.FailStatement + c.FailCommit + c.AmbiguousCommit + c.Busy
}

// String lists the counts in a fixed order.
func (c Counts) String() string {
	return fmt.Sprintf("unavailable=%d disk_full=%d fail_begin=%d fail_statement=%d fail_commit=%d ambiguous_commit=%d busy=%d",
		c.Unavailable, c.DiskFull, c.FailBegin, c.FailStatement, c.FailCommit, c.AmbiguousCommit, c.Busy)
}

// Storage is a database/sql/driver.Driver that wraps another (the SQLite
// driver) and fails its operations on command. It simulates a storage
// outage (every open, prepare, ping, begin, statement and commit refused
// while the clock is inside a window), a busy database, an I/O error on a
// statement, a commit that fails and one that succeeds but reports
// failure. Every error it makes up is an *Error wrapping ErrInjected.
//
// With nothing armed and no window it forwards every call, and every
// optional interface database/sql uses, to the wrapped driver unchanged:
// connections, transactions and statements behave exactly like the raw
// driver's. Rows and results are the wrapped driver's own. Rollback is
// never refused, so a failed transaction can always be cleaned up. The
// wrapped driver's connections and statements must have the context-aware
// interfaces (as modernc.org/sqlite's do); others are refused with
// ErrDriverUnsupported.
//
// Armed faults are one-shot and fire in the order they were armed, each
// on the next operation of its kind (begin, statement, commit). A
// statement that is its own transaction (its context marked by
// sqlconn.OwnTransaction: PostgreSQL's fused statements) has all three:
// its implicit BEGIN, itself and its implicit COMMIT (see runOwn). Inside
// an outage window the window wins: armed faults wait for the first
// operation after it. Storage is safe for concurrent use.
type Storage struct {
	inner driver.Driver
	clock clockwork.Clock
	// dialect is the per-store part: which error each fault injects
	// (SQLite's result codes, or a PostgreSQL server's SQLSTATEs; see
	// NewPostgres) and what the store's connections must have.
	dialect dialect

	mu      sync.Mutex
	bypass  int       // Bypass calls running
	down    bool      // open-ended outage
	full    bool      // the disk is full: every commit is refused
	until   time.Time // outage until this time (exclusive)
	armed   []Fault
	counts  Counts
	commits int64 // transactions the inner driver committed
	// own counts the faults that hit each statement run as its own
	// transaction (sqlconn.OwnTransaction), by the statement's name.
	own map[string]Counts
}

// NewStorage wraps inner; outage windows are measured on clock.
func NewStorage(inner driver.Driver, clock clockwork.Clock) *Storage {
	if inner == nil || clock == nil {
		panic("faults: NewStorage needs a driver and a clock")
	}
	return &Storage{inner: inner, clock: clock, dialect: sqliteDialect{}}
}

// SetUnavailableUntil makes storage unavailable while the clock is before
// t. A zero t ends a timed window (an open-ended one stays).
func (s *Storage) SetUnavailableUntil(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.until = t
}

// SetUnavailable starts (on) an open-ended outage, or ends (off) every
// outage, timed or not.
func (s *Storage) SetUnavailable(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = on
	if !on {
		s.until = time.Time{}
	}
}

// SetDiskFull makes the disk full (on) or gives it room again (off).
// While it is full every commit fails as SQLite's does on a full disk
// (SQLITE_FULL, "database or disk is full"): the transaction is rolled
// back and nothing of it is applied. Reads, and the statements of a
// transaction before its commit, run as usual, as they do on a real full
// disk in WAL mode, where a transaction's pages reach the file at commit.
// A full disk is not one of Faults: the simulator's fault plan
// does not draw it.
func (s *Storage) SetDiskFull(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.full = on
}

// Unavailable reports whether storage is inside an outage window now.
func (s *Storage) Unavailable() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unavailableLocked()
}

func (s *Storage) unavailableLocked() bool {
	return s.down || s.clock.Now().Before(s.until)
}

// Arm queues the one-shot fault f. It panics on a fault that is not one
// of Faults (a bug in the caller).
func (s *Storage) Arm(f Fault) {
	f.op() // panics on an unknown fault
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = append(s.armed, f)
}

// Disarm clears every armed fault. It leaves an outage window alone.
func (s *Storage) Disarm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = nil
}

// Armed returns the faults armed and not yet fired, in arming order.
func (s *Storage) Armed() []Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Fault(nil), s.armed...)
}

// Bypass runs fn with every fault suspended: no operation is refused for
// the outage window and no armed fault fires or is spent, so an observer
// (the simulator's invariant checker) can read through the same database
// without disturbing the fault plan. The suspension covers every operation
// while fn runs, from any goroutine; live tests that use Storage
// concurrently should not rely on it.
func (s *Storage) Bypass(fn func()) {
	s.mu.Lock()
	s.bypass++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.bypass--
		s.mu.Unlock()
	}()
	fn()
}

// Counts returns how many faults have fired.
func (s *Storage) Counts() Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts
}

func (s *Storage) committed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.commits++
}

// Commits returns how many transactions reached the database, including
// those an ambiguous-commit fault reported as failed: a reader that sees
// the number unchanged knows nothing was written.
func (s *Storage) Commits() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.commits
}

// String describes the outage window, the armed faults and the counts,
// e.g. "storage: unavailable until 2026-01-01T00:00:05Z; armed [busy
// fail_commit]; fired unavailable=2 fail_begin=0 ...".
func (s *Storage) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	b.WriteString("storage: ")
	switch {
	case s.down:
		b.WriteString("unavailable (open-ended)")
	case s.clock.Now().Before(s.until):
		b.WriteString("unavailable until " + s.until.UTC().Format(time.RFC3339Nano))
	case s.full:
		b.WriteString("disk full")
	default:
		b.WriteString("available")
	}
	b.WriteString("; armed [")
	for i, f := range s.armed {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(string(f))
	}
	b.WriteString("]; fired ")
	b.WriteString(s.counts.String())
	return b.String()
}

// Open opens a connection through the wrapped driver, unless storage is
// unavailable. A connection without the context-aware interfaces the
// wrapper forwards to is closed and refused with ErrDriverUnsupported.
func (s *Storage) Open(name string) (driver.Conn, error) {
	if err := s.check(opOpen); err != nil {
		return nil, err
	}
	c, err := s.inner.Open(name)
	if err != nil {
		return nil, err
	}
	return wrapConn(s, c)
}

// check decides whether an operation of kind op fails: inside an outage
// window every operation but a rollback does; otherwise the first armed
// fault of op's kind fires. It returns the injected error, or nil to run
// the operation. For commits use commitFault, which also reports an
// ambiguous commit.
func (s *Storage) check(op storageOp) error { return s.checkOwn(op, "") }

// checkOwn is check for an operation of the statement named stmt, run as
// its own transaction ("" for any other operation): a fault that fires is
// counted for the statement too.
func (s *Storage) checkOwn(op storageOp, stmt string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bypass > 0 {
		return nil
	}
	if s.unavailableLocked() {
		s.counts.Unavailable++
		s.ownLocked(stmt, func(c *Counts) { c.Unavailable++ })
		return s.dialect.unavailableError(op)
	}
	f, ok := s.takeLocked(op)
	if !ok {
		return nil
	}
	s.ownLocked(stmt, func(c *Counts) { c.add(f) })
	return s.dialect.faultError(f)
}

// ownLocked counts a fault that hit the statement named stmt, if any.
func (s *Storage) ownLocked(stmt string, count func(*Counts)) {
	if stmt == "" {
		return
	}
	if s.own == nil {
		s.own = map[string]Counts{}
	}
	c := s.own[stmt]
	count(&c)
	s.own[stmt] = c
}

// StatementCounts returns how many faults have hit the statement named
// name while it ran as its own transaction (a statement whose context
// sqlconn.OwnTransaction marked with name): its implicit BEGIN (FailBegin,
// Busy), the statement itself (FailStatement), its implicit COMMIT
// (FailCommit, AmbiguousCommit, a full disk), or an outage at any of them.
func (s *Storage) StatementCounts(name string) Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.own[name]
}

// commitFault decides a commit: refuse it (err set), apply it and then
// report ambiguous failure (ambiguous set), or run it (both zero).
func (s *Storage) commitFault() (ambiguous *Error, err *Error) { return s.commitFaultOwn("") }

// commitFaultOwn is commitFault for the implicit COMMIT of the statement
// named stmt, run as its own transaction ("" for a transaction's COMMIT).
func (s *Storage) commitFaultOwn(stmt string) (ambiguous *Error, err *Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bypass > 0 {
		return nil, nil
	}
	if s.unavailableLocked() {
		s.counts.Unavailable++
		s.ownLocked(stmt, func(c *Counts) { c.Unavailable++ })
		return nil, s.dialect.unavailableError(opCommit)
	}
	if s.full {
		s.counts.DiskFull++
		s.ownLocked(stmt, func(c *Counts) { c.DiskFull++ })
		return nil, s.dialect.diskFullError()
	}
	f, ok := s.takeLocked(opCommit)
	if !ok {
		return nil, nil
	}
	s.ownLocked(stmt, func(c *Counts) { c.add(f) })
	if f == AmbiguousCommit {
		return s.dialect.faultError(f), nil
	}
	return nil, s.dialect.faultError(f)
}

// takeLocked removes and counts the first armed fault of op's kind.
func (s *Storage) takeLocked(op storageOp) (Fault, bool) {
	for i, f := range s.armed {
		if f.op() == op {
			s.armed = append(s.armed[:i:i], s.armed[i+1:]...)
			s.counts.add(f)
			return f, true
		}
	}
	return "", false
}

// dialect is the per-store part of a Storage: the error each fault
// injects, read as the store's own failure, and what the store's
// connections must have beyond innerConn. The wrapping itself (driver.go)
// is the same for every store.
type dialect interface {
	// unavailableError is what an operation of kind op gets inside an
	// outage window.
	unavailableError(op storageOp) *Error
	// diskFullError is what a commit gets while the disk is full.
	diskFullError() *Error
	// faultError is what armed fault f injects.
	faultError(f Fault) *Error
	// connClosedError is what an operation on a connection a fault ended
	// gets. It is no new fault: the one that ended the connection was
	// counted.
	connClosedError(op storageOp) *Error
	// accepts reports whether c, which has innerConn, has what else the
	// store's wrapper forwards to; connNeeds names all of it, for the
	// refusal.
	accepts(c driver.Conn) bool
	connNeeds() string
}

// faultDiskFull names the refusals of a full disk.
const faultDiskFull = "disk_full"

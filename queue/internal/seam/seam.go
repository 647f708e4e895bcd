// Package seam is the one typed interface between the queue's protocol
// (package queue) and its stores (queue/internal/sqlite,
// queue/internal/postgres). The protocol (intake, fencing, settling,
// attempts, admission, effects, events, group commit) is written once in
// queue over a Store; a store supplies its connections, its SQL files, how
// it claims, how it classifies its driver's errors and what it can do
// beyond the statements every store has (Capabilities). A store imports
// this package and model, never queue.
package seam

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"io/fs"
	"time"

	"github.com/leasehold/leasehold/model"
)

// Store is what one database supplies the protocol. Its SQL files hold
// the statements the protocol runs by name (Query values): queries.sql
// and the other "-- name: NAME" files, migrations/NNNN_name.sql and, where
// the store has functions, functions.sql.
type Store interface {
	// Dialect names the store; errors and evidence call it so.
	Dialect() string
	// SQLFiles holds queries.sql and migrations/ at its root.
	SQLFiles() fs.FS
	// Positional reports whether the driver takes only $n parameters, so
	// that the loader rewrites :name parameters and binds them in order.
	Positional() bool
	// Handles reports whether a --db value names one of this store's
	// databases. The default store (SQLite) is asked last.
	Handles(path string) bool
	// Connect opens the connection pool p asks for. It checks no schema.
	Connect(ctx context.Context, p ConnectParams) (Pool, error)
	// Classify returns err's storage class, or "" when err is no storage
	// failure of this store's driver.
	Classify(err error) Class
	// Folded is the history of migrations the store's baseline replaced,
	// or nil.
	Folded() *Folded
	// Capabilities states what the store does beyond the statements every
	// store has: the protocol asks here, never by the store's type, its
	// dialect's name or whether its files define a statement.
	Capabilities() Capabilities
	// Claim takes, inside tx, up to p.Max claimable tasks for p.Worker in
	// claim order (priority, then run_at, then submission; due, within
	// their deadline, their user below its running limit), and calls took
	// with each, as the row was before it was taken, in claim order; an
	// error from took ends the claim with it. Taking a task sets state
	// running, version + 1, owner, lease_until = tx.Now() + p.Lease,
	// claimed_at, heartbeat_at and updated_at = tx.Now(). The protocol
	// applies the same change to the snapshot it returns and records the
	// event.
	Claim(tx Tx, p ClaimParams, took func(model.Task) error) error
}

// Capabilities are what a store does beyond the statements every store
// has. A nil interface is an ability the store lacks.
type Capabilities struct {
	// Groups: concurrent writes of one process may share one transaction
	// (group commit); GroupLanes is how many such groups may run at once.
	Groups     bool
	GroupLanes int
	// Fuse runs a fused group in one statement.
	Fuse Fuser
	// Submit runs a submit in one statement: alone as its own
	// transaction, or inside a group's.
	Submit Submitter
	// SubmitBatch writes a batch's new tasks, their keys and their
	// submitted events in one statement (submit_batch), each task's row
	// inserted holding its event's seq, instead of tasks_insert and
	// events_insert.
	SubmitBatch bool
	// Notify tells other processes' idle workers that a task became
	// claimable; without it only this process's are woken.
	Notify Notifier
	// LocalFile: the database is a file on this machine, which snapshots,
	// restores and Inspect read directly, and whose path holds no secret.
	LocalFile bool
	// BlockedFlags: queued tasks carry blocked flags that a limit change
	// re-evaluates (reblock_all, reblock_user).
	BlockedFlags bool
	// CounterRows: the counters are rows of changes that housekeeping
	// folds (tally_compact, tally_rows).
	CounterRows bool
	// CommitsOutOfOrder: transactions commit in any order relative to the
	// event numbers they drew, so a read of the trail from a cursor first
	// waits for the writers (events_after_lock), and migrating takes a
	// lock of its own first (migrations_lock).
	CommitsOutOfOrder bool
	// WALTruncate: after a full disk the store truncates its write-ahead
	// log (wal_truncate) until the disk has room.
	WALTruncate bool
	// RunningOverActive names the third count of counters_check: a count
	// of users whose running count passes their active count, or else of
	// queued tasks whose blocked or limited flags are wrong.
	RunningOverActive bool
}

// Query names a statement of a store's SQL files (a "-- name: NAME"
// section). Statements are run by these values only, declared once each
// in a querynames.go file; the tests hold every value to a section of the
// files of the stores it is declared for, and every section to a value.
type Query struct{ name string }

// Name returns the Query of the section called name; it is called only
// in the declarations of querynames.go files.
func Name(name string) Query { return Query{name} }

// String returns the section's name.
func (q Query) String() string { return q.name }

// Querier runs a store's named statement that returns rows: as its own
// transaction (Runner) or inside a write transaction (Tx).
type Querier interface {
	Query(name Query, args ...any) (*sql.Rows, error)
}

// Tx is a write transaction as a store's Claim, Submit and Notify see
// it: the time the operation runs at and the store's statements, by
// name.
type Tx interface {
	Querier
	// Now is the operation's time, at the precision the queue stores.
	Now() time.Time
	// Exec runs a named statement and returns the rows it affected.
	Exec(name Query, args ...any) (int64, error)
}

// Runner runs a store's statements that are each their own transaction
// (a fused group, a lone submit): its Query runs one outside any
// transaction, where no caller's cancellation may end it (its outcome
// would be unknown), and names a failed statement's error by the
// statement alone. Text gives a statement's text for a connection of the
// store's own (the wake listener's).
type Runner interface {
	Querier
	// Text is a named statement's text as the store's driver takes it.
	Text(name Query) string
}

// ClaimParams is a claim as a store takes it.
type ClaimParams struct {
	Worker string
	Lease  time.Duration
	Max    int
	// Kinds are the kinds the claim serves (model.ClaimRequest.Kinds):
	// it reads and takes no task of another kind. Nil: every kind.
	Kinds []string
}

// KindsArg is a claim's kinds as the stores' statements take them: ""
// for every kind (nil), else a JSON array.
func KindsArg(kinds []string) string {
	if kinds == nil {
		return ""
	}
	b, err := json.Marshal(kinds)
	if err != nil {
		panic("seam: kinds: " + err.Error()) // a []string always marshals
	}
	return string(b)
}

// ConnectParams is what a store's Connect is given: the queue's Options
// that concern connections.
type ConnectParams struct {
	Path     string // a file, Memory, or a URL the store handles
	ReadOnly bool
	// Image: the database starts from an image (SQLite in memory only).
	Image bool
	// Driver replaces the store's driver, for fault injection.
	Driver   driver.Driver
	MaxConns int
	// BusyTimeout is how long a connection waits for a lock; zero means
	// the store's default, NoBusyTimeout not at all.
	BusyTimeout time.Duration
	// Synchronous is SQLite's synchronous PRAGMA: FULL or NORMAL.
	Synchronous string
	// IdleInTransactionTimeout is how long a server's session may sit idle
	// inside a transaction: zero is the store's default,
	// NoIdleInTransactionTimeout turns it off.
	IdleInTransactionTimeout time.Duration
}

// Memory is the Path of an in-memory SQLite database.
const Memory = ":memory:"

// NoBusyTimeout, as ConnectParams.BusyTimeout, makes a locked database
// fail at once instead of waiting.
const NoBusyTimeout time.Duration = -1

// NoIdleInTransactionTimeout, as ConnectParams.IdleInTransactionTimeout,
// turns the server's idle-in-transaction timeout off.
const NoIdleInTransactionTimeout time.Duration = -1

// Pool is an open store: its connections and what evidence says of them.
type Pool struct {
	DB *sql.DB
	// Settings are the settings the connections were opened with, for
	// evidence; they hold no password.
	Settings []string
	// LeaseMin is the shortest lease a live worker may take over these
	// connections: how long a session cut off inside a transaction can
	// hold locks others wait for (zero where none can).
	LeaseMin time.Duration
}

// Class names the kind of storage failure an error is.
type Class string

// The storage classes. Any other error (bad input, a stale claim, a
// missing task) is no storage failure and has no class.
const (
	ClassBusy     Class = "busy"        // another connection holds the lock past the busy timeout
	ClassDiskFull Class = "disk_full"   // the disk (or a quota) is full
	ClassIO       Class = "io_error"    // the operating system reported an I/O error
	ClassReadOnly Class = "read_only"   // the file, its directory or the mount cannot be written
	ClassCantOpen Class = "cannot_open" // the file (or its -wal, -shm) cannot be opened
	ClassCorrupt  Class = "corrupt"     // the file is not a sound SQLite database
	ClassNoMemory Class = "no_memory"   // the database could not allocate memory
	// ClassConflict: the database aborted the transaction to keep
	// transactions serializable (a serialization failure or a deadlock);
	// the operation may be retried.
	ClassConflict Class = "conflict"
	// ClassConnection: the connection to a database server was lost or
	// could not be made.
	ClassConnection Class = "connection_lost"
	// ClassConstraint: a statement broke a constraint the protocol should
	// have checked first (a unique key raced by another process).
	ClassConstraint Class = "constraint"
)

// StateAdmissionBusy is the SQLSTATE of a statement whose admission
// needed the exclusive path in a transaction that had written, while
// another transaction held an admission slot (PostgreSQL's admission may
// not wait there: see its functions file). The statement wrote nothing;
// it is a conflict (ClassConflict), and the operation is run again in a
// transaction of its own, where admission may wait.
const StateAdmissionBusy = "LH002"

// AppliedMigration is a migration as a database records it.
type AppliedMigration struct {
	Version  int
	Name     string
	Checksum string
}

// Folded is the history of migrations a store's baseline replaced.
type Folded struct {
	// Migrations are the folded migrations as a database records them, in
	// order.
	Migrations []AppliedMigration
	// Dropped are the statements that drop the folded history's functions
	// whose signatures the functions file no longer has.
	Dropped []string
	// SchemaFrom is the first version whose schema is the baseline's (the
	// migrations after it changed functions only): a database at it or
	// later is moved onto the baseline.
	SchemaFrom int
	// Build is a commit that carries every folded migration, named in the
	// refusal of a database that applied too few of them.
	Build string
}

// Fuser is a store that runs a fused group in one statement.
type Fuser interface {
	// CompleteAndClaim runs p as one statement outside any transaction and
	// returns the tasks it took, as they were (queued), in claim order;
	// ErrFusedMismatch when a claim did not match and nothing was written.
	// Any other error is the statement's: unknown reports whether it may
	// have committed.
	CompleteAndClaim(r Runner, p FusedParams) (taken []model.Task, unknown bool, err error)
}

// ErrFusedMismatch: a fused group's statement did not match every claim
// and wrote nothing.
var ErrFusedMismatch = errors.New("queue: a fused group's claim did not match; nothing written")

// FusedParams is what a fused group's statement is given.
type FusedParams struct {
	Now    time.Time
	Claims [][3]any  // [task id, fence, now] of each completion, as complete_batch takes them
	Events [][12]any // the completed event of each, in member order
	// Claim is the merged claim's worker, lease, kinds and tasks (the sum
	// of the members' Max), Max zero when no member claims.
	Claim ClaimParams
	Scope string
}

// Submitter is a store that runs a submit in one statement, the same
// alone and in a group.
type Submitter interface {
	// SubmitOne runs p as one statement through q, alone (a Runner) or
	// inside a transaction (a Tx), and returns its outcome. An error is
	// the statement's: unknown reports whether, run alone, it may have
	// committed.
	SubmitOne(q Querier, p SubmitParams) (out SubmitOutcome, unknown bool, err error)
}

// SubmitParams is a submit: the normalized request, the ID its task
// gets if inserted, when it runs, and its event's actor and scope.
type SubmitParams struct {
	ID      string
	Request model.Normalized
	RunAt   time.Time
	Now     time.Time
	Timely  bool // the request's deadline has not passed at Now
	Actor   string
	Scope   string
}

// SubmitOutcome is how a submit ended: its kind, the task's ID where
// there is one, and the count and limit a full queue's refusal names.
type SubmitOutcome struct {
	Kind     SubmitKind
	TaskID   string
	N, Limit int64
}

// SubmitKind is how a submit ended.
type SubmitKind string

// The ways a submit ends.
const (
	SubmitInserted  SubmitKind = "inserted"
	SubmitReplay    SubmitKind = "replay"
	SubmitConflict  SubmitKind = "conflict"
	SubmitUntimely  SubmitKind = "untimely"
	SubmitUserFull  SubmitKind = "user_full"
	SubmitQueueFull SubmitKind = "queue_full"
)

// Notifier is a store that wakes idle workers in other processes.
type Notifier interface {
	// NotifyReady sends, as a transaction of its own run through q, the
	// notification that a task became claimable. It is sent after the
	// commit that made the task claimable, so a listener it wakes finds
	// the task.
	NotifyReady(q Querier) error
	// Listen opens a connection of its own to the database p names and
	// listens there for the notifications of this queue.
	Listen(ctx context.Context, r Runner, p ConnectParams) (Listener, error)
}

// Listener is a connection listening for a queue's notifications.
type Listener interface {
	// Wait returns when a notification of this queue arrives, or with the
	// error that ended the connection or ctx.
	Wait(ctx context.Context) error
	// Close closes the connection.
	Close(ctx context.Context)
}

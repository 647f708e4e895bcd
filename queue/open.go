package queue

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/internal/broken"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue/internal/postgres"
	"github.com/leasehold/leasehold/queue/internal/seam"
	"github.com/leasehold/leasehold/queue/internal/sqlite"
)

// Memory is the Path of an in-memory database. It lives in exactly one
// connection (every pooled connection to :memory: would be a different,
// empty database) and cannot use WAL.
const Memory = seam.Memory

// NoBusyTimeout makes a locked database fail at once with SQLITE_BUSY
// instead of waiting (the simulator injects busy errors as faults).
const NoBusyTimeout = seam.NoBusyTimeout

// Synchronous settings. FULL is the default: NORMAL in WAL mode can lose
// the last commits on power loss, so it is an explicit choice.
const (
	SynchronousFull   = sqlite.SynchronousFull
	SynchronousNormal = sqlite.SynchronousNormal
)

// MigrateMode says what Open does with a database whose schema is older
// than this build's.
type MigrateMode int

const (
	// MigrateNew creates the schema in an empty database and refuses an
	// older one with ErrSchemaOutdated (the migrate command upgrades it).
	MigrateNew MigrateMode = iota
	// MigrateAll applies every pending migration.
	MigrateAll
)

// Options configures Open. Clock and IDs are required.
type Options struct {
	Path        string          // database file, or Memory (SQLite), or a URL another store handles
	Clock       clockwork.Clock // the only source of time
	IDs         model.IDSource  // task and schedule IDs
	Rand        model.Rand      // backoff jitter; nil: a fixed-seed PCG
	Backoff     model.Backoff   // zero: model.DefaultBackoff
	Synchronous string          // SynchronousFull (default) or SynchronousNormal
	// BusyTimeout is how long a connection waits for a lock; zero means
	// five seconds, NoBusyTimeout means not at all. On PostgreSQL it is
	// the pool's lock_timeout (unless the URL sets one), and zero leaves
	// the server's.
	BusyTimeout time.Duration
	// MaxConns bounds the pool of a file database (default 4). An
	// in-memory database always uses one connection.
	MaxConns int
	// IdleInTransactionTimeout is, on PostgreSQL, how long a session of the
	// store may sit idle inside a transaction before the server ends it
	// (idle_in_transaction_session_timeout): zero means
	// PostgresIdleInTransactionTimeout (5 s), NoIdleInTransactionTimeout
	// turns it off; the URL's own setting wins. See queue/internal/postgres/session.go.
	IdleInTransactionTimeout time.Duration
	// Driver replaces the SQLite driver, for fault injection; it must open
	// modernc.org/sqlite connections underneath.
	Driver  driver.Driver
	Migrate MigrateMode
	// ReadOnly opens an existing file database for reading only (SQLite's
	// mode=ro): no journal-mode change, no migration, no file created
	// where it cannot be. Its schema must be this build's: an older one is
	// refused with ErrSchemaOutdated, an empty file with ErrNoSchema.
	// Every write fails with a read_only storage error. See openReadOnly
	// for a database in a place nobody can write.
	ReadOnly bool
	// Image, for an in-memory database, is a database image (from
	// Queue.Image) to start from instead of an empty database: the
	// simulator opens thousands of worlds from one migrated image.
	Image []byte
	// Validators check the payloads of each kind at intake (Submit,
	// SubmitMany, AddSchedule), after normalization and before anything
	// is written; a refusal is returned as an ErrInvalidInput naming the
	// payload's field (see PayloadError). Their messages must name fields
	// and rules, never quote a value. A kind without a validator accepts
	// any well-formed JSON object.
	Validators map[string]model.PayloadValidator
	// UnknownKind, when set, is asked about each kind at intake (Submit,
	// SubmitMany, AddSchedule) that Validators does not name; an
	// error refuses the request as it is returned, before anything is
	// written (it should be a *model.ValidationError naming the kind's
	// field, so ErrInvalidInput). Nil: such a kind accepts any
	// well-formed JSON object. Tasks a schedule already holds still run.
	UnknownKind func(kind string) error
	// Defaults, by kind, fill the cost budget and step limit of a request
	// that names none (zero) at intake (Submit, SubmitMany, AddSchedule):
	// a request is hashed as sent, before they apply, so its replays are
	// recognised whatever the defaults (model.NormalizeWith).
	Defaults map[string]model.RequestDefaults
	// Ungrouped turns group commit off: each write operation runs in a
	// transaction of its own on its caller's goroutine (for comparison;
	// see group.go).
	Ungrouped bool
	// Unfused runs every group as a transaction of BEGIN, its statements
	// and COMMIT, never as one statement that commits itself (a fused
	// group, fused.go; a lone submit, submitone.go): for tests of the
	// usual way's statements on PostgreSQL. The simulator runs fused, as
	// production does.
	Unfused bool
	// NoWakeNotify turns off, on PostgreSQL, the notification sent after
	// a commit that made a task claimable (see wake.go), so that no
	// statement runs on the pool at times of its own: the simulator's
	// worlds, whose statements and faults must follow its schedule alone,
	// set it. Idle workers (Wake) then learn of the queue's new tasks by
	// polling, or from another queue's notifications.
	NoWakeNotify bool
	// TrailWindow bounds how far past its cursor one read of the trail
	// for some users looks (EventsThrough); zero means EventsScanWindow.
	// The simulator sets a small one, so that its followers, in runs of
	// a few hundred events, cross window marks.
	TrailWindow int
}

// Queue is the durable queue. It is safe for concurrent use; writes are
// serialised by SQLite (BEGIN IMMEDIATE).
type Queue struct {
	db      *sql.DB
	store   backend // the database's part: connections, SQL, claims, errors
	sql     *sqlSet // store's queries and migrations
	clock   clockwork.Clock
	ids     model.IDSource
	backoff model.Backoff
	// validators is Options.Validators.
	validators map[string]model.PayloadValidator
	// unknownKind is Options.UnknownKind.
	unknownKind func(kind string) error
	// defaults is Options.Defaults.
	defaults map[string]model.RequestDefaults
	// trailWindow is Options.TrailWindow, its default filled.
	trailWindow int64

	stmtMu  sync.Mutex
	stmts   map[string]*sql.Stmt // prepared on first use
	path    string
	pragmas []string
	// params are the options the store connected with, o.Path as given
	// (a URL's password included): the wake listener (Wake) opens a
	// connection of its own with them. Never printed.
	params seam.ConnectParams

	mu sync.Mutex // guards rand and ids, which need not be goroutine-safe, and spareIDs
	// spareIDs are identifiers drawn and then not used (unusedID), in the
	// order drawn, without their prefixes: the next draws return them.
	spareIDs []string
	rand     model.Rand

	// closed is set by Close before the database is closed, so that every
	// operation after it fails with ErrClosed (database/sql's own error for
	// a closed database is no sentinel).
	closed atomic.Bool

	health health // Health's last probe and the writes failed since

	// Group commit (group.go): the operations waiting, the lead token and
	// Close's signal; ops is nil for an Ungrouped queue.
	ops  chan *member
	lead chan struct{}
	// hold, set while the simulator holds the queue's writes
	// (grouphook.go), takes each grouped write as a held member.
	hold     *Hold
	closing  chan struct{}
	stopOnce sync.Once
	stats    groupStats
	// fuse, set where the store fuses groups (its Fuse capability) and
	// Options.Unfused is not, runs qualifying groups (fused.go) and a lone
	// submit (submitone.go) as one statement that is its own transaction;
	// a test of the usual way's statements clears it.
	fuse bool

	commits notifier      // woken after every write; see WaitEvents
	wakes   listeners     // Wake's listeners, stopped by Close
	local   localWakes    // Wake's channels on SQLite, woken by this process's commits
	notify  readyNotifier // on PostgreSQL, notifies after commits that made a task claimable

	prunes pruneCursor // where PruneDue's next pass starts (prune.go)

	// leaseMin is the store's shortest lease for a live worker (LeaseMin).
	leaseMin time.Duration
}

// Open opens (creating if needed) the database at o.Path and checks its
// schema version, creating or migrating the schema as o.Migrate allows.
// o.Path picks the store (see backendFor): a file path or Memory is
// SQLite's. The queue's statements are prepared on first use, not here.
func Open(ctx context.Context, o Options) (*Queue, error) {
	if o.Clock == nil || o.IDs == nil {
		return nil, errors.New("queue: open: Options.Clock and Options.IDs are required")
	}
	b := backendFor(o.Path)
	set, err := sqlOf(b)
	if err != nil {
		return nil, err
	}
	pool, err := b.Connect(ctx, o.connectParams())
	if err != nil {
		return nil, err
	}
	db := pool.DB
	q := &Queue{db: db, leaseMin: pool.LeaseMin, store: b, sql: set, clock: o.Clock, ids: o.IDs, backoff: o.Backoff, rand: o.Rand, path: printablePath(b, o.Path), params: o.connectParams(),
		pragmas: pool.Settings, stmts: map[string]*sql.Stmt{}, validators: maps.Clone(o.Validators), unknownKind: o.UnknownKind,
		defaults: maps.Clone(o.Defaults)}
	q.fuse = b.Capabilities().Fuse != nil && !o.Unfused
	q.notify.off = b.Capabilities().Notify == nil || o.NoWakeNotify
	q.notify.log = slog.Default()
	q.trailWindow = int64(cmp.Or(o.TrailWindow, eventsScanWindow))
	if q.backoff == (model.Backoff{}) {
		q.backoff = model.DefaultBackoff
	}
	if q.rand == nil {
		q.rand = rand.New(rand.NewPCG(1, 2))
	}
	if o.Image != nil {
		if err := q.load(ctx, o.Image); err != nil {
			db.Close()
			return nil, err
		}
	}
	check := func() error { return q.migrate(ctx, o.Migrate) }
	if o.ReadOnly {
		check = func() error { return q.checkCurrent(ctx) }
	}
	if err := check(); err != nil {
		db.Close()
		return nil, err
	}
	if !o.Ungrouped && b.Capabilities().Groups {
		q.startGroups(b.Capabilities().GroupLanes)
	}
	return q, nil
}

// connectParams are the options a store's Connect is given.
func (o Options) connectParams() seam.ConnectParams {
	return seam.ConnectParams{Path: o.Path, ReadOnly: o.ReadOnly, Image: o.Image != nil, Driver: o.Driver,
		MaxConns: o.MaxConns, BusyTimeout: o.BusyTimeout, Synchronous: o.Synchronous,
		IdleInTransactionTimeout: o.IdleInTransactionTimeout}
}

// ErrNoSchema: a database opened read-only has no leasehold schema (an
// empty or foreign file); nothing creates one in a read-only open.
var ErrNoSchema = errors.New("database has no leasehold schema")

// checkCurrent refuses a database whose schema is not exactly this
// build's, changing nothing.
func (q *Queue) checkCurrent(ctx context.Context) error {
	p, err := plan(ctx, q.db, q.sql)
	switch {
	case err != nil:
		return err
	case len(p.applied) == 0:
		return fmt.Errorf("queue: %s: %w", q.path, ErrNoSchema)
	case p.changes():
		return outdated(p)
	}
	return nil
}

// Pragmas returns the PRAGMAs every connection is opened with, for
// evidence reports.
func (q *Queue) Pragmas() []string { return append([]string(nil), q.pragmas...) }

// printablePath is o.Path as the queue keeps and prints it: a URL's
// password is replaced (a store's URL may carry one; see RedactURL).
func printablePath(b backend, path string) string {
	if b.Capabilities().LocalFile {
		return path
	}
	return RedactURL(path)
}

// Path returns the database path the queue was opened with (for a URL,
// with any password replaced by xxxxx).
func (q *Queue) Path() string { return q.path }

// EngineVersion returns the database engine and its version, as evidence
// reports name them: "SQLite 3.49.1", "PostgreSQL 15.8".
func (q *Queue) EngineVersion(ctx context.Context) (string, error) {
	if err := q.checkOpen("engine version"); err != nil {
		return "", err
	}
	var v string
	if err := q.readRow(ctx, qEngineVersion).Scan(&v); err != nil {
		return "", fmt.Errorf("queue: engine version: %w", err)
	}
	return v, nil
}

// Close closes the database. Every operation begun after it fails with
// ErrClosed (one already running when Close is called may fail with
// database/sql's error instead).
func (q *Queue) Close() error {
	q.closed.Store(true)
	q.wakes.stop()
	if q.ops != nil {
		q.stopOnce.Do(q.stopGroups)
	}
	q.notify.wait()
	q.stmtMu.Lock()
	for _, s := range q.stmts {
		s.Close()
	}
	q.stmts = map[string]*sql.Stmt{}
	q.stmtMu.Unlock()
	return q.db.Close()
}

// query returns a named query; an unknown name is a programming error.
func (q *Queue) query(name string) query {
	text, ok := q.sql.queries[name]
	if !ok || name == "task_columns" {
		panic("queue: no query named " + name)
	}
	return text
}

// variant returns the name of the query to run for name: name itself,
// or, in the leasehold_broken build, its text for a broken variant that
// is switched on (see expandBroken).
func (q *Queue) variant(name string) string {
	for _, v := range q.query(name).variants {
		if broken.On(v) {
			return name + "~" + v.String()
		}
	}
	return name
}

func (q *Queue) cachedStmt(name string) *sql.Stmt {
	q.stmtMu.Lock()
	defer q.stmtMu.Unlock()
	return q.stmts[name]
}

// prepared returns the named statement prepared on the database, preparing
// it on first use. It must not be called while this goroutine holds the
// only connection of an in-memory database in a transaction.
func (q *Queue) prepared(ctx context.Context, name string) (*sql.Stmt, error) {
	if err := q.checkOpen(name); err != nil {
		return nil, err
	}
	if s := q.cachedStmt(name); s != nil {
		return s, nil
	}
	s, err := q.db.PrepareContext(ctx, q.query(name).text)
	if err != nil {
		return nil, fmt.Errorf("queue: prepare %s: %w", name, err)
	}
	q.stmtMu.Lock()
	defer q.stmtMu.Unlock()
	if existing := q.stmts[name]; existing != nil {
		s.Close()
		return existing, nil
	}
	q.stmts[name] = s
	return s, nil
}

// checkOpen refuses an operation on a closed queue with ErrClosed, naming the
// operation.
func (q *Queue) checkOpen(op string) error {
	if q.closed.Load() {
		return fmt.Errorf("queue: %s: %w", op, ErrClosed)
	}
	return nil
}

// prepareLater prepares on the database, once t is over, the statements t
// could only prepare for itself. A failure here is harmless: the next use
// prepares again.
func (q *Queue) prepareLater(ctx context.Context, t *txn) {
	for _, name := range t.unprepared {
		_, _ = q.prepared(ctx, name)
	}
}

// serializer is what modernc.org/sqlite connections offer to copy an
// in-memory database in and out.
type serializer interface {
	Serialize() ([]byte, error)
	Deserialize([]byte) error
}

// rawSerializer finds the serializer under any driver wrappers (they offer
// Unwrap() driver.Conn).
func rawSerializer(dc any) (serializer, error) {
	for {
		if s, ok := dc.(serializer); ok {
			return s, nil
		}
		u, ok := dc.(interface{ Unwrap() driver.Conn })
		if !ok {
			return nil, fmt.Errorf("queue: connection %T cannot serialize", dc)
		}
		dc = u.Unwrap()
	}
}

// load replaces the in-memory database with an image.
func (q *Queue) load(ctx context.Context, image []byte) error {
	if q.path != Memory {
		return &model.ValidationError{Field: "image", Problem: "only an in-memory database starts from an image"}
	}
	conn, err := q.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("queue: load image: %w", err)
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		s, err := rawSerializer(dc)
		if err != nil {
			return err
		}
		if err := s.Deserialize(image); err != nil {
			return fmt.Errorf("queue: load image: %w", err)
		}
		return nil
	})
}

// Image returns a copy of an in-memory database, to open others from with
// Options.Image.
func (q *Queue) Image(ctx context.Context) ([]byte, error) {
	if q.path != Memory {
		return nil, &model.ValidationError{Field: "image", Problem: "only an in-memory database has an image"}
	}
	if err := q.checkOpen("image"); err != nil {
		return nil, err
	}
	conn, err := q.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("queue: image: %w", err)
	}
	defer conn.Close()
	var image []byte
	err = conn.Raw(func(dc any) error {
		s, err := rawSerializer(dc)
		if err != nil {
			return err
		}
		image, err = s.Serialize()
		return err
	})
	return image, err
}

// now reads the injected clock at the precision the queue stores.
func (q *Queue) now() time.Time { return model.Truncate(q.clock.Now()) }

// newID returns the ID for key: derived from it when the source derives
// IDs from keys (the simulator's), fresh otherwise. A task ID that breaks
// model.TaskIDRule is refused (model.ErrBadIDSource) before it is stored.
func (q *Queue) newID(prefix, key string) (string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var id string
	if len(q.spareIDs) > 0 {
		id = prefix + q.spareIDs[0]
		q.spareIDs = q.spareIDs[1:]
	} else {
		id = model.NewIDFor(q.ids, prefix, key)
	}
	if prefix == model.TaskIDPrefix {
		if err := model.CheckNewTaskID(id); err != nil {
			return "", err
		}
	}
	return id, nil
}

// unusedID gives back id, which newID drew with prefix for a write that
// then did not use it (a lone submit that was a replay or refused: see
// submitone.go), so that the next draw returns it under its own prefix and
// the identifiers used are those the writes would have drawn had this one
// drawn none (a seeded source's suffix does not depend on the prefix). An
// identifier derived from a key (the simulator's) is never given back:
// drawing it used nothing up.
func (q *Queue) unusedID(prefix, id string) {
	if _, keyed := q.ids.(model.KeyedIDSource); keyed || !strings.HasPrefix(id, prefix) {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.spareIDs = append(q.spareIDs, strings.TrimPrefix(id, prefix))
}

// draw returns the jitter draw for key: derived from it when the source
// draws for keys (the simulator's), the next draw otherwise.
func (q *Queue) draw(key string) uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return model.DrawFor(q.rand, key)
}

// PostgresIdleInTransactionTimeout is the PostgreSQL store's
// idle_in_transaction_session_timeout when neither Options nor the URL
// sets one (postgres.IdleInTransactionTimeout).
const PostgresIdleInTransactionTimeout = postgres.IdleInTransactionTimeout

// NoIdleInTransactionTimeout, as Options.IdleInTransactionTimeout, turns
// the timeout off: the simulator and the tests whose traces must not
// depend on how fast the machine runs (a session idle past the timeout
// while the process is descheduled would be ended).
const NoIdleInTransactionTimeout = seam.NoIdleInTransactionTimeout

// PostgresTCPUserTimeout is the PostgreSQL store's TCP user timeout, the
// bound of its keepalive (postgres.TCPUserTimeout).
const PostgresTCPUserTimeout = postgres.TCPUserTimeout

// LeaseMin is the shortest lease a live worker of this queue may take
// (worker.NewRunner refuses a shorter one). On PostgreSQL it is the
// idle-in-transaction timeout plus the TCP user timeout (25 s by
// default): a worker cut off inside a write transaction can stop other
// workers' writes that need its locks that long, and their leases must
// outlast it. Zero on SQLite.
func (q *Queue) LeaseMin() time.Duration { return q.leaseMin }

// SessionSettings reads back, from the database, the settings a
// connection of the queue's pool runs with, each as "name=value" in the
// database's own words: on PostgreSQL the session's
// idle_in_transaction_session_timeout, TCP keepalives and user timeout,
// lock_timeout, and the statement_timeout and idle_session_timeout it
// must not have; on SQLite its PRAGMAs. Pragmas says what was asked;
// this says what took hold.
func (q *Queue) SessionSettings(ctx context.Context) ([]string, error) {
	if err := q.checkOpen("session settings"); err != nil {
		return nil, err
	}
	rows, err := q.readRows(ctx, qSessionSettings)
	if err != nil {
		return nil, fmt.Errorf("queue: session settings: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return nil, fmt.Errorf("queue: session settings: %w", err)
		}
		out = append(out, name+"="+value)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("queue: session settings: %w", err)
	}
	return out, nil
}

package queue

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"modernc.org/sqlite"

	"github.com/leasehold/leasehold/model"
)

// Memory is the Path of an in-memory database. It lives in exactly one
// connection (every pooled connection to :memory: would be a different,
// empty database) and cannot use WAL.
const Memory = ":memory:"

// NoBusyTimeout makes a locked database fail at once with SQLITE_BUSY
// instead of waiting (the simulator injects busy errors as faults).
const NoBusyTimeout time.Duration = -1

// Synchronous settings. FULL is the default: NORMAL in WAL mode can lose
// the last commits on power loss, so it is an explicit choice.
const (
	SynchronousFull   = "FULL"
	SynchronousNormal = "NORMAL"
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
	Path        string          // database file, or Memory
	Clock       clockwork.Clock // the only source of time
	IDs         model.IDSource  // task and schedule IDs
	Rand        model.Rand      // backoff jitter; nil: a fixed-seed PCG
	Backoff     model.Backoff   // zero: model.DefaultBackoff
	Synchronous string          // SynchronousFull (default) or SynchronousNormal
	// BusyTimeout is how long a connection waits for a lock; zero means
	// five seconds, NoBusyTimeout means not at all.
	BusyTimeout time.Duration
	// MaxConns bounds the pool of a file database (default 4). An
	// in-memory database always uses one connection.
	MaxConns int
	// Driver replaces the SQLite driver, for fault injection; it must open
	// modernc.org/sqlite connections underneath.
	Driver  driver.Driver
	Migrate MigrateMode
}

// Queue is the durable queue. It is safe for concurrent use; writes are
// serialised by SQLite (BEGIN IMMEDIATE).
type Queue struct {
	db      *sql.DB
	clock   clockwork.Clock
	ids     model.IDSource
	backoff model.Backoff
	stmts   map[string]*sql.Stmt
	path    string
	pragmas []string

	mu   sync.Mutex // guards rand and ids, which need not be goroutine-safe
	rand model.Rand
}

// Open opens (creating if needed) the database at o.Path, checks its
// schema version and prepares the queue's statements.
func Open(ctx context.Context, o Options) (*Queue, error) {
	if o.Clock == nil || o.IDs == nil {
		return nil, errors.New("queue: open: Options.Clock and Options.IDs are required")
	}
	dsn, pragmas, err := buildDSN(o)
	if err != nil {
		return nil, err
	}
	drv := o.Driver
	if drv == nil {
		drv = &sqlite.Driver{}
	}
	db := sql.OpenDB(connector{dsn: dsn, drv: drv})
	if o.Path == Memory {
		db.SetMaxOpenConns(1)
		db.SetMaxIdleConns(1)
		db.SetConnMaxLifetime(0)
		db.SetConnMaxIdleTime(0)
	} else {
		conns := o.MaxConns
		if conns <= 0 {
			conns = 4
		}
		db.SetMaxOpenConns(conns)
		db.SetMaxIdleConns(conns)
	}
	q := &Queue{db: db, clock: o.Clock, ids: o.IDs, backoff: o.Backoff, rand: o.Rand, path: o.Path, pragmas: pragmas}
	if q.backoff == (model.Backoff{}) {
		q.backoff = model.DefaultBackoff
	}
	if q.rand == nil {
		q.rand = rand.New(rand.NewPCG(1, 2))
	}
	if err := q.migrate(ctx, o.Migrate); err != nil {
		db.Close()
		return nil, err
	}
	if err := q.prepare(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return q, nil
}

func buildDSN(o Options) (string, []string, error) {
	if o.Path == "" {
		return "", nil, &model.ValidationError{Field: "db", Problem: "path required"}
	}
	if strings.ContainsAny(o.Path, "?#") || strings.HasPrefix(o.Path, "file:") {
		return "", nil, &model.ValidationError{Field: "db", Problem: fmt.Sprintf("path %q may not contain ? or # or start with file:", o.Path)}
	}
	sync := o.Synchronous
	if sync == "" {
		sync = SynchronousFull
	}
	if sync != SynchronousFull && sync != SynchronousNormal {
		return "", nil, &model.ValidationError{Field: "synchronous", Problem: fmt.Sprintf("must be FULL or NORMAL, got %q", sync)}
	}
	busy := o.BusyTimeout
	switch {
	case busy == 0:
		busy = 5 * time.Second
	case busy < 0:
		busy = 0
	}
	// busy_timeout comes first so the pragmas after it wait for locks.
	pragmas := []string{fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds())}
	if o.Path != Memory {
		pragmas = append(pragmas, "journal_mode(WAL)")
	}
	pragmas = append(pragmas, "synchronous("+sync+")", "foreign_keys(1)")
	v := url.Values{}
	for _, p := range pragmas {
		v.Add("_pragma", p)
	}
	v.Set("_txlock", "immediate")
	return o.Path + "?" + v.Encode(), pragmas, nil
}

// connector opens connections through a chosen driver.
type connector struct {
	dsn string
	drv driver.Driver
}

func (c connector) Connect(context.Context) (driver.Conn, error) { return c.drv.Open(c.dsn) }
func (c connector) Driver() driver.Driver                        { return c.drv }

// Pragmas returns the PRAGMAs every connection is opened with, for
// evidence reports.
func (q *Queue) Pragmas() []string { return append([]string(nil), q.pragmas...) }

// Path returns the database path the queue was opened with.
func (q *Queue) Path() string { return q.path }

// DB returns the underlying database handle, for snapshots and tests.
func (q *Queue) DB() *sql.DB { return q.db }

// Close closes the database.
func (q *Queue) Close() error {
	for _, s := range q.stmts {
		s.Close()
	}
	return q.db.Close()
}

func (q *Queue) prepare(ctx context.Context) error {
	queries, err := loadQueries()
	if err != nil {
		return err
	}
	q.stmts = map[string]*sql.Stmt{}
	for name, text := range queries {
		if name == "task_columns" || strings.HasPrefix(name, "migration") {
			continue
		}
		stmt, err := q.db.PrepareContext(ctx, text)
		if err != nil {
			return fmt.Errorf("queue: prepare %s: %w", name, err)
		}
		q.stmts[name] = stmt
	}
	return nil
}

// now reads the injected clock at the precision the queue stores.
func (q *Queue) now() time.Time { return model.Truncate(q.clock.Now()) }

func (q *Queue) newID(prefix string) string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ids.NewID(prefix)
}

func (q *Queue) draw() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.rand.Uint64()
}

package sim

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/faults"
	"github.com/leasehold/leasehold/internal/pgtest/pgowner"
	"github.com/leasehold/leasehold/internal/redact"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// Store names the database the simulated worlds run on: SQLite in memory
// (the zero Store), or a PostgreSQL database (PostgresStore), in which
// each world runs in a schema of its own. The schedule, the checks and the
// oracle are the same on both; so are the storage faults, which read on
// PostgreSQL as the server's and its connections' failures do
// (faults.NewPostgresStorage).
type Store struct {
	pg *pgStore // nil: SQLite
}

// The stores' names, as --store spells them.
const (
	StoreSQLite   = "sqlite"
	StorePostgres = "postgres"
)

// ErrStoreURL is returned for a PostgreSQL store whose URL is missing or
// is no postgres:// URL.
var ErrStoreURL = errors.New("sim: the postgres store needs a postgres:// URL")

// PostgresOptions are a PostgreSQL store's dealings with a server it
// shares; the zero value works.
type PostgresOptions struct {
	// ConnsMax bounds the connections the store holds open at once, its
	// worlds' and its own (PostgresConnsDefault when zero): worlds past it
	// wait for a connection to close (dbpool_pg.go).
	ConnsMax int
	// Clock times the waits between dials the server refused for having
	// too many clients (the real clock: the wait is for other programs'
	// connections); nil: such a refusal is returned at once.
	Clock clockwork.Clock
}

// PostgresStore returns the store of worlds in the PostgreSQL database
// dbURL names. Each world takes a schema of the store's, migrated when it
// was made and reset before each world to exactly its state just after
// migrating (every table emptied and refilled with the rows migrating
// left, every sequence set back), which makes a world as fresh as a new
// schema far quicker than migrating one: the sweeps open thousands. Close
// drops the schemas.
func PostgresStore(dbURL string, o PostgresOptions) (Store, error) {
	loc, err := queue.ParseLocation(dbURL)
	switch {
	case err != nil:
		return Store{}, fmt.Errorf("%w: %w", ErrStoreURL, err) // ParseLocation's words hold no password
	case loc.Kind != queue.StorePostgres:
		return Store{}, ErrStoreURL
	}
	if o.ConnsMax < 0 {
		return Store{}, fmt.Errorf("sim: a postgres store's connections: want at least 0, got %d", o.ConnsMax)
	}
	if o.ConnsMax == 0 {
		o.ConnsMax = PostgresConnsDefault
	}
	return Store{pg: &pgStore{url: loc.URL, prefix: fmt.Sprintf("%s%d_%d_", ownedPrefix, os.Getpid(), storeCounter.Add(1)),
		conns: newPGConns(o.ConnsMax, o.Clock)}}, nil
}

// Ready makes sure the store can open a world: on PostgreSQL it connects
// and makes (and migrates) the first world's schema, so that an
// unreachable server or a refused connection is reported once, before any
// seed runs.
func (s Store) Ready(ctx context.Context) error {
	if s.pg == nil {
		return nil
	}
	ws, err := s.pg.take(ctx)
	if err != nil {
		return err
	}
	s.pg.give(ws)
	return nil
}

// Name returns "sqlite" or "postgres".
func (s Store) Name() string {
	if s.pg != nil {
		return StorePostgres
	}
	return StoreSQLite
}

// Close drops the store's schemas; for SQLite it does nothing. No world
// may be running on the store.
func (s Store) Close() error {
	if s.pg == nil {
		return nil
	}
	return s.pg.close()
}

// storeConnsMax is the pool of a world's PostgreSQL queue: one connection,
// as the SQLite world has (DESIGN.md: one database connection), so no two
// of the world's operations ever interleave on the server.
const storeConnsMax = 1

// opened is a world's queue, its fault-injecting driver, and what ends it.
type opened struct {
	q       *queue.Queue
	storage *faults.Storage
	// release gives the world's schema back once the queue is closed (nil
	// for SQLite in memory, which goes with its connection).
	release func()
}

// close closes the queue and gives its schema back.
func (o opened) close() error {
	err := o.q.Close()
	if o.release != nil {
		o.release()
	}
	return err
}

// open opens a world's queue on the store, through a fault-injecting
// driver, with IDs and jitter derived from seed: a task's ID from its
// user, key and the instant it is submitted at, its jitter from (task,
// attempt), so that the queue and the reference give the same task the
// same ID and the same backoff however many draws either made.
func (s Store) open(ctx context.Context, clock clockwork.Clock, seed uint64) (opened, error) {
	ids, rand := model.NewDerivedIDsAt(subSeed(seed, streamIDs), clock.Now), model.NewDerivedRand(subSeed(seed, streamJitter))
	if s.pg == nil {
		pool, err := worldDBs() // its connections start as the migrated image (dbpool.go)
		if err != nil {
			return opened{}, err
		}
		storage := faults.NewStorage(pool, clock)
		q, err := queue.Open(ctx, queue.Options{Path: queue.Memory, Clock: clock, IDs: ids, Rand: rand,
			Driver: storage, BusyTimeout: queue.NoBusyTimeout, TrailWindow: simTrailWindow})
		if err != nil {
			return opened{}, fmt.Errorf("sim: open queue: %w", err)
		}
		return opened{q: q, storage: storage}, nil
	}
	ws, err := s.pg.take(ctx)
	if err != nil {
		return opened{}, err
	}
	storage := faults.NewPostgresStorage(s.pg.conns.driver(stdlib.GetDefaultDriver()), clock)
	// Fused, as production runs: a lone submit is submit_one and a group
	// of completions complete_and_claim, each one statement that is its
	// own transaction, on which the injector's BEGIN, statement and COMMIT
	// faults land (storagefault's runOwn). No idle-in-transaction
	// timeout: a world's transaction idle past it while the process is
	// descheduled would be ended by the server, and the trace would then
	// depend on the machine's speed.
	q, err := queue.Open(ctx, queue.Options{Path: ws.url, Clock: clock, IDs: ids, Rand: rand,
		Driver: storage, MaxConns: storeConnsMax, IdleInTransactionTimeout: queue.NoIdleInTransactionTimeout,
		TrailWindow: simTrailWindow, NoWakeNotify: true})
	if err != nil {
		s.pg.give(ws)
		return opened{}, fmt.Errorf("sim: open queue on schema %s: %w", ws.name, err)
	}
	return opened{q: q, storage: storage, release: func() { s.pg.give(ws) }}, nil
}

// schemaPrefix starts the name of every schema the simulator makes, so
// that one a killed run left behind is recognised as the simulator's.
const schemaPrefix = "leasehold_sim_"

// storeCounter numbers the stores of this process, whose schemas' names
// it keeps apart.
var storeCounter atomic.Int64

// pgStore is a PostgreSQL store's schemas: the pristine copy of a
// migrated schema's rows, and the worlds' schemas, each used by one world
// at a time.
type pgStore struct {
	url   string
	conns *pgConns // every connection the store and its worlds open, counted (dbpool_pg.go)

	ownMu sync.Mutex // serialises own

	// adminMu serialises the admin connection, which makes, resets and
	// drops schemas; adminRelease gives its room in conns back.
	adminMu      sync.Mutex
	admin        *pgx.Conn
	adminRelease func()

	mu     sync.Mutex
	prefix string         // of the store's schema names; own may change it, before any schema is made
	owner  *pgowner.Owner // holds the store's owner lock (pgowner.go); nil until own
	// ownerRelease gives the owner connection's room in conns back.
	ownerRelease func()
	made         int            // world schemas made
	free         []*worldSchema // schemas no world holds
	all          []*worldSchema
	pristine     *pristine // made with the first schema
	closed       bool
}

// worldSchema is one world's schema.
type worldSchema struct {
	name  string
	url   string // the world's URL: the schema alone on the search_path
	dirty bool   // a world has used it since it was last reset
}

// pristine is what a just-migrated schema holds: the tables (every one of
// which a reset empties), the rows migrating left in them (copied into a
// schema of their own), and the sequences' state.
type pristine struct {
	schema    string
	tables    []string // every table, in name order
	filled    []string // the tables migrating left rows in
	sequences []sequenceState
}

// sequenceState is a sequence as migrating left it: setval(name, value,
// called) puts it back.
type sequenceState struct {
	name   string
	value  int64
	called bool
}

// take returns a schema for a world, reset to its just-migrated state.
func (p *pgStore) take(ctx context.Context) (*worldSchema, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errors.New("sim: the postgres store is closed")
	}
	var ws *worldSchema
	if n := len(p.free); n > 0 {
		ws, p.free = p.free[n-1], p.free[:n-1]
	}
	p.mu.Unlock()
	if ws == nil {
		var err error
		if ws, err = p.makeSchema(ctx); err != nil {
			return nil, err
		}
	} else if ws.dirty {
		if err := p.reset(ctx, ws); err != nil {
			p.give(ws)
			return nil, err
		}
	}
	ws.dirty = true
	return ws, nil
}

// give hands a world's schema back.
func (p *pgStore) give(ws *worldSchema) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.free = append(p.free, ws)
	}
}

// makeSchema makes, migrates and returns a new world schema; the first
// one made also gives the store its pristine copy.
func (p *pgStore) makeSchema(ctx context.Context) (*worldSchema, error) {
	if err := p.own(ctx); err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.made++
	name := fmt.Sprintf("%sw%d", p.prefix, p.made)
	p.mu.Unlock()
	worldURL, err := p.schemaURL(name)
	if err != nil {
		return nil, err
	}
	ws := &worldSchema{name: name, url: worldURL}
	p.mu.Lock()
	p.all = append(p.all, ws)
	p.mu.Unlock()
	err = p.withAdmin(ctx, func(admin *pgx.Conn) error {
		_, err := admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+ident(name)+" CASCADE; CREATE SCHEMA "+ident(name))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sim: create schema %s: %w", name, scrub(err, p.url))
	}
	q, err := queue.Open(ctx, queue.Options{Path: ws.url, Clock: clockwork.NewFakeClockAt(Epoch), IDs: model.NewSeededIDs(0), MaxConns: 1,
		Driver: p.conns.driver(stdlib.GetDefaultDriver())})
	if err == nil {
		err = q.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("sim: migrate schema %s: %w", name, err)
	}
	err = p.withAdmin(ctx, func(admin *pgx.Conn) error {
		p.mu.Lock()
		kept, prefix := p.pristine != nil, p.prefix
		p.mu.Unlock()
		if kept { // the admin connection is alone: no other schema is keeping it now
			return nil
		}
		pr, err := keepPristine(ctx, admin, name, prefix+"pristine")
		if err == nil {
			p.mu.Lock()
			p.pristine = pr
			p.mu.Unlock()
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return ws, nil
}

// schemaURL returns the store's URL with the settings of its connections
// and, unless schema is "", the schema alone on the search_path.
func (p *pgStore) schemaURL(schema string) (string, error) {
	u, err := url.Parse(p.url)
	if err != nil {
		return "", ErrStoreURL
	}
	v := u.Query()
	// The world's database is scratch: a commit that need not wait for the
	// disk changes nothing a client sees (no server crash is simulated),
	// and a seed makes hundreds of commits.
	v.Set("synchronous_commit", "off")
	if schema != "" {
		v.Set("search_path", schema)
	}
	u.RawQuery = v.Encode()
	return u.String(), nil
}

// withAdmin runs f on the store's admin connection, alone, connecting it
// (within the store's share of the server's connections) first if need
// be.
func (p *pgStore) withAdmin(ctx context.Context, f func(*pgx.Conn) error) error {
	p.adminMu.Lock()
	defer p.adminMu.Unlock()
	if p.admin == nil {
		adminURL, err := p.schemaURL("")
		if err != nil {
			return err
		}
		release := p.conns.hold()
		var conn *pgx.Conn
		err = p.conns.dial(ctx, func() (err error) {
			conn, err = pgx.Connect(ctx, adminURL)
			return err
		})
		if err != nil {
			release()
			return fmt.Errorf("sim: connect to the postgres store: %w", scrub(err, p.url))
		}
		p.admin, p.adminRelease = conn, release
	}
	return f(p.admin)
}

// keepPristine copies what the just-migrated schema holds into the schema
// named into and returns how to put it back.
func keepPristine(ctx context.Context, conn *pgx.Conn, schema, into string) (*pristine, error) {
	pr := &pristine{schema: into}
	rows, err := conn.Query(ctx, `SELECT c.relname::TEXT, c.relkind::TEXT FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'S') ORDER BY c.relname COLLATE "C"`, schema)
	if err != nil {
		return nil, fmt.Errorf("sim: read schema %s: %w", schema, err)
	}
	var sequences []string
	for rows.Next() {
		var name, kind string
		if err := rows.Scan(&name, &kind); err != nil {
			return nil, fmt.Errorf("sim: read schema %s: %w", schema, err)
		}
		if kind == "S" {
			sequences = append(sequences, name)
		} else {
			pr.tables = append(pr.tables, name)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sim: read schema %s: %w", schema, err)
	}
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+ident(into)+" CASCADE; CREATE SCHEMA "+ident(into)); err != nil {
		return nil, fmt.Errorf("sim: create schema %s: %w", into, err)
	}
	for _, t := range pr.tables {
		var n int64
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+ident(schema, t)).Scan(&n); err != nil {
			return nil, fmt.Errorf("sim: read %s.%s: %w", schema, t, err)
		}
		if n == 0 {
			continue
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE "+ident(into, t)+" AS TABLE "+ident(schema, t)); err != nil {
			return nil, fmt.Errorf("sim: copy %s.%s: %w", schema, t, err)
		}
		pr.filled = append(pr.filled, t)
	}
	for _, name := range sequences {
		st := sequenceState{name: name}
		if err := conn.QueryRow(ctx, "SELECT last_value, is_called FROM "+ident(schema, name)).Scan(&st.value, &st.called); err != nil {
			return nil, fmt.Errorf("sim: read sequence %s.%s: %w", schema, name, err)
		}
		pr.sequences = append(pr.sequences, st)
	}
	return pr, nil
}

// resetSQL is the statement batch that puts schema back as pr found its
// first: every table emptied, the migrated rows restored (identity
// columns included), and every sequence where migrating left it.
func (pr *pristine) resetSQL(schema string) string {
	var b strings.Builder
	b.WriteString("TRUNCATE ")
	for i, t := range pr.tables {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(ident(schema, t))
	}
	b.WriteString(";\n")
	for _, t := range pr.filled {
		fmt.Fprintf(&b, "INSERT INTO %s OVERRIDING SYSTEM VALUE SELECT * FROM %s;\n", ident(schema, t), ident(pr.schema, t))
	}
	for _, st := range pr.sequences {
		fmt.Fprintf(&b, "SELECT setval('%s', %d, %t);\n", strings.ReplaceAll(ident(schema, st.name), "'", "''"), st.value, st.called)
	}
	return b.String()
}

// reset puts a used world schema back to its just-migrated state, in one
// transaction.
func (p *pgStore) reset(ctx context.Context, ws *worldSchema) error {
	p.mu.Lock()
	pr := p.pristine
	p.mu.Unlock()
	err := p.withAdmin(ctx, func(admin *pgx.Conn) error {
		_, err := admin.Exec(ctx, "BEGIN;\n"+pr.resetSQL(ws.name)+"COMMIT;")
		return err
	})
	if err != nil {
		return fmt.Errorf("sim: reset schema %s: %w", ws.name, scrub(err, p.url))
	}
	ws.dirty = false
	return nil
}

// close drops every schema of the store.
func (p *pgStore) close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	all, pr, owner := p.all, p.pristine, p.owner
	p.all, p.free = nil, nil
	p.mu.Unlock()
	ctx := context.Background()
	var errs []error
	p.adminMu.Lock()
	defer p.adminMu.Unlock()
	if p.admin != nil {
		for i, ws := range all {
			drop := "DROP SCHEMA IF EXISTS " + ident(ws.name) + " CASCADE"
			if i == 0 && pr != nil {
				drop += "; DROP SCHEMA IF EXISTS " + ident(pr.schema) + " CASCADE"
			}
			if _, err := p.admin.Exec(ctx, drop); err != nil {
				errs = append(errs, fmt.Errorf("sim: drop schema %s: %w", ws.name, scrub(err, p.url)))
			}
		}
		errs = append(errs, p.admin.Close(ctx))
		p.adminRelease()
		p.admin = nil
	}
	if owner != nil { // its lock goes with it, after the schemas
		errs = append(errs, owner.Close(ctx))
		p.ownerRelease()
	}
	return errors.Join(errs...)
}

// ident quotes a (schema-qualified) name.
func ident(parts ...string) string { return pgx.Identifier(parts).Sanitize() }

// scrub removes the URL's passwords from err's message.
func scrub(err error, dbURL string) error { return redact.Error(err, dbURL) }

package sim

import (
	"context"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"

	"modernc.org/libc"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/leasehold/leasehold/internal/sqlconn"
)

// Every world starts from the same migrated database, and compiling the
// queue's statements was a tenth of a seed's time: a new in-memory
// database (or sqlite3_deserialize into an old one, which expires every
// compiled statement) compiles each again. So the worlds' databases come
// from a pool of connections that outlive their worlds, each keeping its
// compiled statements: a connection given back is restored, page by page,
// to the migrated image (through SQLite's sqlite_dbpage table, in one
// transaction, then truncated to the image's length), so that the next
// world finds a database byte for byte the image's but for the header's
// commit counters, under the same schema, and its statements still
// compiled. The restore then drops the connection's cached pages: SQLite
// keeps each cached page's decoded b-tree header beside it, and a page
// rewritten underneath would be read by its old header (without the drop,
// every reused world failed with "database disk image is malformed").
//
// The pool sits below the fault injector: a world's storage faults see
// every open, prepare, statement and commit the queue makes, exactly as
// with a fresh connection.

// SerialSQLiteEnv, set to "1" in the environment of a process that runs
// its worlds one at a time (a sweep process: SweepProcessEnv sets it),
// configures the SQLite library single-threaded before its first use.
// modernc.org/sqlite opens every connection SQLITE_OPEN_FULLMUTEX, so
// without it every call into a connection, each column read among them,
// takes and leaves the connection's mutex through the C library's
// emulated pthread mutexes. A world's queue holds one connection, which
// database/sql lends to one caller at a time, so within a world nothing
// calls SQLite concurrently; across worlds the pool then lends one
// connection at a time and refuses a second (errSerialBusy) rather than
// let two worlds share the library's unguarded state.
const SerialSQLiteEnv = "LEASEHOLD_SIM_SERIAL_SQLITE"

// errSerialBusy is the pool's refusal of a second world's connection while
// the library is single-threaded.
var errSerialBusy = errors.New("sim: SQLite is single-threaded in this process (" + SerialSQLiteEnv + "=1): one world's connection at a time")

// worldDBs is the process's pool of world databases.
var worldDBs = sync.OnceValues(func() (*dbPool, error) {
	serial := false
	if os.Getenv(SerialSQLiteEnv) == "1" {
		var err error
		if serial, err = singleThreadSQLite(); err != nil {
			return nil, err
		}
	}
	image, err := migratedImage()
	if err != nil {
		return nil, err
	}
	p, err := newDBPool(&sqlite.Driver{}, image)
	if err != nil {
		return nil, err
	}
	p.serial = serial
	return p, nil
})

// singleThreadSQLite configures the SQLite library single-threaded
// (SQLITE_CONFIG_SINGLETHREAD: no mutex on the library's state or on any
// connection). It reports false, and leaves the library as it was, when
// the library is already in use in this process (sqlite3_config answers
// SQLITE_MISUSE once it is initialised).
func singleThreadSQLite() (bool, error) {
	tls := libc.NewTLS()
	defer tls.Close()
	switch rc := sqlite3.Xsqlite3_config(tls, sqlite3.SQLITE_CONFIG_SINGLETHREAD, 0); rc {
	case sqlite3.SQLITE_OK:
		return true, nil
	case sqlite3.SQLITE_MISUSE:
		return false, nil
	default:
		return false, fmt.Errorf("sim: configure SQLite single-threaded: result code %d", rc)
	}
}

// dbPool is a driver.Driver whose connections are in-memory databases that
// start as image and go back to the pool when closed.
type dbPool struct {
	inner driver.Driver
	image []byte
	pages [][]byte // image, page by page

	// serial is set when the library is single-threaded: at most one
	// connection is lent at a time, and lent counts them.
	serial bool

	mu   sync.Mutex
	idle map[string][]*pooledConn // by DSN: a connection keeps its DSN's settings
	lent int
}

func newDBPool(inner driver.Driver, image []byte) (*dbPool, error) {
	if len(image) < 100 {
		return nil, fmt.Errorf("sim: database image of %d bytes has no header", len(image))
	}
	size := int(binary.BigEndian.Uint16(image[16:18]))
	if size == 1 {
		size = 65536
	}
	if size < 512 || len(image)%size != 0 {
		return nil, fmt.Errorf("sim: database image of %d bytes is not whole pages of %d", len(image), size)
	}
	p := &dbPool{inner: inner, image: image, idle: map[string][]*pooledConn{}}
	for off := 0; off < len(image); off += size {
		p.pages = append(p.pages, image[off:off+size])
	}
	return p, nil
}

// Open returns an idle connection for dsn restored to the image, or a new
// one loaded with it.
func (p *dbPool) Open(dsn string) (conn driver.Conn, err error) {
	p.mu.Lock()
	if p.serial && p.lent > 0 {
		p.mu.Unlock()
		return nil, errSerialBusy
	}
	p.lent++
	var c *pooledConn
	if idle := p.idle[dsn]; len(idle) > 0 {
		c, p.idle[dsn] = idle[len(idle)-1], idle[:len(idle)-1]
	}
	p.mu.Unlock()
	defer func() {
		if err != nil {
			p.mu.Lock()
			p.lent--
			p.mu.Unlock()
		}
	}()
	if c != nil {
		if err := c.restore(p.pages); err == nil {
			c.closed = false
			return c, nil
		}
		c.discard() // a connection that cannot be restored is not reused
	}
	dc, err := p.inner.Open(dsn)
	if err != nil {
		return nil, err
	}
	ic, ok := dc.(poolInner)
	if !ok {
		return nil, errors.Join(fmt.Errorf("sim: connection %T lacks an interface the pool needs", dc), dc.Close())
	}
	c = &pooledConn{Conn: sqlconn.Conn{Inner: ic}, pool: p, dsn: dsn, inner: ic, stmts: sqlconn.NewLender(0)}
	if err := ic.Deserialize(p.image); err != nil {
		return nil, errors.Join(fmt.Errorf("sim: load the database image: %w", err), dc.Close())
	}
	return c, nil
}

// give takes back a closed connection.
func (p *dbPool) give(c *pooledConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lent--
	p.idle[c.dsn] = append(p.idle[c.dsn], c)
}

// poolInner is what the pool needs of a modernc.org/sqlite connection.
type poolInner interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.SessionResetter
	driver.Validator
	driver.Pinger
	Deserialize([]byte) error
	Serialize() ([]byte, error)
}

// pooledConn is one pooled connection. It lends its compiled statements by
// their SQL text, one user at a time (sqlconn.Lender), as the queue's own
// statement cache does for one connection's life, but for the connection's
// whole life across worlds; every other call goes to the SQLite
// connection as it is (sqlconn.Conn).
type pooledConn struct {
	sqlconn.Conn
	pool   *dbPool
	dsn    string
	inner  poolInner
	closed bool

	stmts  *sqlconn.Lender
	dbpage driver.Stmt // INSERT INTO sqlite_dbpage, for restore
	begin  string      // the BEGIN the DSN asks for (beginSQL)
}

// Close gives the connection back to the pool; its database is restored
// when it is next opened.
func (c *pooledConn) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	c.pool.give(c)
	return nil
}

// discard closes the connection for good.
func (c *pooledConn) discard() {
	c.stmts.Close()
	if c.dbpage != nil {
		c.dbpage.Close()
	}
	c.inner.Close()
}

func (c *pooledConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

// PrepareContext lends the compiled statement for query, or compiles one.
func (c *pooledConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return c.stmts.Lend(query, func() (driver.Stmt, error) { return c.inner.PrepareContext(ctx, query) })
}

// BeginTx begins a transaction with the connection's compiled BEGIN (as
// the DSN's _txlock asks), where modernc.org/sqlite compiles BEGIN,
// COMMIT and ROLLBACK again for every transaction; a transaction with
// options other than the defaults begins on the SQLite connection.
func (c *pooledConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if opts != (driver.TxOptions{}) {
		return c.Conn.BeginTx(ctx, opts)
	}
	if err := c.control(ctx, c.beginSQL()); err != nil {
		return nil, err
	}
	return &pooledTx{c: c, ctx: ctx}, nil
}

// Begin begins with the default options.
func (c *pooledConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

// beginSQL is the BEGIN the connection's DSN asks for: its _txlock mode,
// as modernc.org/sqlite's own begins.
func (c *pooledConn) beginSQL() string {
	if c.begin == "" {
		c.begin = "BEGIN"
		if _, query, ok := strings.Cut(c.dsn, "?"); ok {
			if v, err := url.ParseQuery(query); err == nil && v.Get("_txlock") != "" {
				c.begin = "BEGIN " + strings.ToUpper(v.Get("_txlock"))
			}
		}
	}
	return c.begin
}

// control runs one of the transaction's control statements, compiled
// once and lent from the connection's statements.
func (c *pooledConn) control(ctx context.Context, query string) error {
	st, err := c.PrepareContext(ctx, query)
	if err != nil {
		return err
	}
	_, err = st.(driver.StmtExecContext).ExecContext(ctx, nil)
	return errors.Join(err, st.Close())
}

// pooledTx is a transaction begun by pooledConn.BeginTx.
type pooledTx struct {
	c   *pooledConn
	ctx context.Context
}

// Commit commits; a COMMIT that fails is followed by a ROLLBACK (which
// fails harmlessly when the failed COMMIT already ended the transaction),
// as modernc.org/sqlite's own transactions do.
func (t *pooledTx) Commit() error {
	err := t.c.control(t.ctx, "COMMIT")
	if err != nil {
		_ = t.c.control(context.Background(), "ROLLBACK")
	}
	return err
}

// Rollback rolls back.
func (t *pooledTx) Rollback() error { return t.c.control(context.Background(), "ROLLBACK") }

// IsValid: a connection given back to the pool is no longer valid.
func (c *pooledConn) IsValid() bool { return !c.closed && c.inner.IsValid() }

// restore writes the image's pages over the database's, truncates it to
// the image's length, and drops the cached pages (whose decoded b-tree
// headers would describe the old contents).
func (c *pooledConn) restore(pages [][]byte) (err error) {
	ctx := context.Background()
	if c.dbpage == nil {
		if c.dbpage, err = c.inner.PrepareContext(ctx, "INSERT INTO sqlite_dbpage (pgno, data) VALUES (?, ?)"); err != nil {
			return fmt.Errorf("sim: restore: %w", err)
		}
	}
	write := c.dbpage.(driver.StmtExecContext)
	tx, err := c.inner.BeginTx(ctx, driver.TxOptions{})
	if err != nil {
		return fmt.Errorf("sim: restore: %w", err)
	}
	args := make([]driver.NamedValue, 2)
	put := func(pgno int, data any) error {
		args[0] = driver.NamedValue{Ordinal: 1, Value: int64(pgno)}
		args[1] = driver.NamedValue{Ordinal: 2, Value: data}
		_, err := write.ExecContext(ctx, args)
		return err
	}
	for i, page := range pages {
		if err = put(i+1, page); err != nil {
			break
		}
	}
	if err == nil {
		err = put(len(pages)+1, nil) // the pages past the image's go (after every write: a write cancels it)
	}
	if err != nil {
		return errors.Join(fmt.Errorf("sim: restore: %w", err), tx.Rollback())
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sim: restore: %w", err)
	}
	if _, err := c.inner.ExecContext(ctx, "PRAGMA shrink_memory", nil); err != nil {
		return fmt.Errorf("sim: restore: %w", err)
	}
	return nil
}

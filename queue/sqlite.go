package queue

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/leasehold/leasehold/model"
)

//go:embed sql/sqlite
var sqliteFiles embed.FS

// sqliteBackend is the SQLite store (modernc.org/sqlite), the default: a
// file in WAL mode with PRAGMAs in its DSN, or an in-memory database on
// one connection; writes grouped; claims one task at a time in claim order.
type sqliteBackend struct{}

func (sqliteBackend) dialect() string  { return "sqlite" }
func (sqliteBackend) positional() bool { return false }
func (sqliteBackend) groups() bool     { return true }
func (sqliteBackend) groupLanes() int  { return 1 }

// handles: SQLite is the fallback; backendFor asks it nothing.
func (sqliteBackend) handles(string) bool { return true }

func (sqliteBackend) sqlFiles() fs.FS {
	sub, err := fs.Sub(sqliteFiles, "sql/sqlite")
	if err != nil {
		panic("queue: embedded sql/sqlite: " + err.Error()) // fs.Sub fails only on an invalid name
	}
	return sub
}

// connect opens o.Path: read-only (see connectReadOnly) or for writing,
// with BEGIN IMMEDIATE for every transaction (the DSN's _txlock).
func (sqliteBackend) connect(ctx context.Context, o Options) (*sql.DB, []string, error) {
	if o.ReadOnly {
		return connectReadOnly(ctx, o)
	}
	dsn, pragmas, err := buildDSN(o)
	if err != nil {
		return nil, nil, err
	}
	return sqlitePool(o, dsn), pragmas, nil
}

// sqlitePool is the pool on dsn: one connection for an in-memory database
// (every connection to :memory: is a database of its own), o.MaxConns
// (default 4) for a file.
func sqlitePool(o Options, dsn string) *sql.DB {
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
		return db
	}
	conns := o.MaxConns
	if conns <= 0 {
		conns = 4
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	return db
}

// connectReadOnly opens o.Path with mode=ro and makes a first read. In WAL
// mode a reader needs the -shm file, which it creates if it can: in a
// directory or on a mount nobody can write, and with no -shm and -wal left
// by a writer, mode=ro cannot open the file. Then, and only when no -wal
// file exists (so every committed transaction is in the main file, and no
// writer can have the database open: a writer would have had to create the
// -wal), the file is opened as immutable, which SQLite reads without locks
// or companions.
func connectReadOnly(ctx context.Context, o Options) (*sql.DB, []string, error) {
	if o.Path == Memory || o.Image != nil {
		return nil, nil, &model.ValidationError{Field: "db", Problem: "only a database file opens read-only"}
	}
	if _, err := os.Stat(o.Path); err != nil {
		return nil, nil, fmt.Errorf("queue: open %s read-only: %w", o.Path, err)
	}
	try := func(immutable bool) (*sql.DB, []string, error) {
		dsn, pragmas, err := readOnlyDSN(o, immutable)
		if err != nil {
			return nil, nil, err
		}
		db := sqlitePool(o, dsn)
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM sqlite_schema").Scan(&n); err != nil {
			db.Close()
			return nil, nil, fmt.Errorf("queue: open %s read-only: %w", o.Path, err)
		}
		return db, pragmas, nil
	}
	db, pragmas, err := try(false)
	if retry, err := immutableRetry(o.Path, err); !retry {
		return db, pragmas, err
	}
	return try(true)
}

// immutableRetry decides, after a mode=ro open of path failed with err,
// whether to open it as immutable instead (see openReadOnly), or returns
// the error to report.
func immutableRetry(path string, err error) (bool, error) {
	if ClassOf(err) != ClassCantOpen {
		return false, err
	}
	if _, statErr := os.Stat(path + "-wal"); !errors.Is(statErr, os.ErrNotExist) {
		return false, fmt.Errorf("queue: open %s read-only: its -wal file may hold transactions not yet in the file, and "+
			"reading them needs a -shm file this process cannot create: %w", path, err)
	}
	return true, nil
}

// OpenReadOnlyDB opens the SQLite database file at path read-only as Open
// does with Options.ReadOnly, without checking its schema (snapshots and
// upgrades read databases of other versions), and makes a first read to
// be sure it can be read. It has one connection.
func OpenReadOnlyDB(ctx context.Context, path string) (*sql.DB, error) {
	db, _, err := connectReadOnly(ctx, Options{Path: path, MaxConns: 1})
	return db, err
}

// readOnlyDSN is the DSN of a read-only open: a file: URI (SQLite reads
// mode and immutable only from a URI) with the busy timeout and
// query_only, and no journal_mode or synchronous, which are a writer's.
func readOnlyDSN(o Options, immutable bool) (string, []string, error) {
	if _, _, err := buildDSN(o); err != nil { // the same checks of the path and settings
		return "", nil, err
	}
	abs, err := filepath.Abs(o.Path)
	if err != nil {
		return "", nil, fmt.Errorf("queue: open %s read-only: %w", o.Path, err)
	}
	busy := o.BusyTimeout
	switch {
	case busy == 0:
		busy = 5 * time.Second
	case busy < 0:
		busy = 0
	}
	pragmas := []string{fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()), "query_only(1)"}
	v := url.Values{}
	v.Set("mode", "ro")
	if immutable {
		v.Set("immutable", "1")
	}
	for _, p := range pragmas {
		v.Add("_pragma", p)
	}
	return (&url.URL{Scheme: "file", Path: abs}).String() + "?" + v.Encode(), pragmas, nil
}

// buildDSN is the DSN of a writer: the PRAGMAs, busy_timeout first, and
// _txlock=immediate.
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
	// journal_mode(WAL) can lose a race on a new file: see openAttempts.
	pragmas := []string{fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds())}
	if o.Path != Memory {
		pragmas = append(pragmas, "journal_mode(WAL)")
	}
	// temp_store(MEMORY) keeps statement journals in memory: each write of
	// a group commit runs in a savepoint, whose journal (the pages the
	// group changed before it) SQLite otherwise spills to a temporary file
	// past 64 KiB, a write(2) per page, which cost a group of ten more CPU
	// than its COMMIT. It is bounded by the pages one group changes.
	pragmas = append(pragmas, "synchronous("+sync+")", "foreign_keys(1)", "temp_store(MEMORY)")
	v := url.Values{}
	for _, p := range pragmas {
		v.Add("_pragma", p)
	}
	v.Set("_txlock", "immediate")
	return o.Path + "?" + v.Encode(), pragmas, nil
}

// classify reads the SQLite result code of the first error in err's chain
// that carries one.
func (sqliteBackend) classify(err error) StorageClass {
	var c coder
	if !errors.As(err, &c) {
		return ""
	}
	switch c.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_PROTOCOL:
		return ClassBusy
	case sqlite3.SQLITE_FULL:
		return ClassDiskFull
	case sqlite3.SQLITE_IOERR:
		return ClassIO
	case sqlite3.SQLITE_READONLY:
		return ClassReadOnly
	case sqlite3.SQLITE_CANTOPEN:
		return ClassCantOpen
	case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
		return ClassCorrupt
	case sqlite3.SQLITE_NOMEM:
		return ClassNoMemory
	}
	return ""
}

// coder is an error that carries a SQLite result code: modernc.org/sqlite's
// *sqlite.Error, and the errors fault injectors make up in its place.
type coder interface{ Code() int }

// claim takes tasks one at a time: claim_next finds the first in claim
// order (the blocked flag, kept by triggers, excludes users at their
// running limit) and claim_task takes it; the protocol records each claim
// before the next claim_next, which sees the counts the triggers moved.
func (sqliteBackend) claim(t *txn, req model.ClaimRequest, max int, took func(model.Task) error) error {
	now := model.Millis(t.now)
	leaseUntil := model.Millis(t.now.Add(req.Lease))
	for range max {
		task, err := scanTask(t.queryRow("claim_next", sql.Named("now", now)))
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("queue: claim: select: %w", err)
		}
		if err := t.execOne("claim_task", sql.Named("seq", task.Seq), sql.Named("owner", req.Worker),
			sql.Named("lease_until", leaseUntil), sql.Named("now", now)); err != nil {
			return fmt.Errorf("queue: claim: update: %w", err)
		}
		if err := took(task); err != nil {
			return err
		}
	}
	return nil
}

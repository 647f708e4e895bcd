// Package sqlite is the SQLite store of the queue (modernc.org/sqlite),
// the default: a file in WAL mode with PRAGMAs in its DSN, or an
// in-memory database on one connection. It implements seam.Store; the
// protocol that runs over it is package queue's, which this package never
// imports.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	sqlitedriver "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/leasehold/leasehold/internal/broken"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue/internal/seam"
)

//go:embed sql
var files embed.FS

// Store is the SQLite store: writes grouped in one lane; claims in claim
// order, in three statements.
type Store struct{}

var _ seam.Store = Store{}

// Dialect is "sqlite".
func (Store) Dialect() string { return "sqlite" }

// Positional: the driver takes :name parameters.
func (Store) Positional() bool { return false }

// Handles: SQLite is the fallback; the queue asks it nothing.
func (Store) Handles(string) bool { return true }

// Capabilities: group commit in one lane (one writer at a time,
// committing in event order), a file on this machine, whose queued tasks
// carry blocked flags.
func (Store) Capabilities() seam.Capabilities {
	return seam.Capabilities{Groups: true, GroupLanes: 1, LocalFile: true, BlockedFlags: true, WALTruncate: true}
}

// Folded is nil: SQLite's migrations were released, and are never folded.
func (Store) Folded() *seam.Folded { return nil }

// SQLFiles is this package's sql/.
func (Store) SQLFiles() fs.FS {
	sub, err := fs.Sub(files, "sql")
	if err != nil {
		panic("queue: embedded sqlite sql: " + err.Error()) // fs.Sub fails only on an invalid name
	}
	return sub
}

// connect opens o.Path: read-only (see connectReadOnly) or for writing,
// with BEGIN IMMEDIATE for every transaction (the DSN's _txlock).
func (Store) Connect(ctx context.Context, o seam.ConnectParams) (seam.Pool, error) {
	if o.ReadOnly {
		db, pragmas, err := connectReadOnly(ctx, o)
		return seam.Pool{DB: db, Settings: pragmas}, err
	}
	dsn, pragmas, err := buildDSN(o)
	if err != nil {
		return seam.Pool{}, err
	}
	return seam.Pool{DB: sqlitePool(o, dsn), Settings: pragmas}, nil
}

// sqlitePool is the pool on dsn: one connection for an in-memory database
// (every connection to :memory: is a database of its own), o.MaxConns
// (default 4) for a file.
func sqlitePool(o seam.ConnectParams, dsn string) *sql.DB {
	drv := o.Driver
	if drv == nil {
		drv = &sqlitedriver.Driver{}
	}
	db := sql.OpenDB(connector{dsn: dsn, drv: drv})
	if o.Path == seam.Memory {
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
func connectReadOnly(ctx context.Context, o seam.ConnectParams) (*sql.DB, []string, error) {
	if o.Path == seam.Memory || o.Image {
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
	if (Store{}).Classify(err) != seam.ClassCantOpen {
		return false, err
	}
	if _, statErr := os.Stat(path + "-wal"); !errors.Is(statErr, os.ErrNotExist) {
		return false, fmt.Errorf("queue: open %s read-only: its -wal file may hold transactions not yet in the file, and "+
			"reading them needs a -shm file this process cannot create: %w", path, err)
	}
	return true, nil
}

// OpenReadOnly opens the database file at path read-only as Connect does
// with ReadOnly, on one connection, without checking its schema.
func OpenReadOnly(ctx context.Context, path string) (*sql.DB, error) {
	db, _, err := connectReadOnly(ctx, seam.ConnectParams{Path: path, MaxConns: 1})
	return db, err
}

// readOnlyDSN is the DSN of a read-only open: a file: URI (SQLite reads
// mode and immutable only from a URI) with the busy timeout and
// query_only, and no journal_mode or synchronous, which are a writer's.
func readOnlyDSN(o seam.ConnectParams, immutable bool) (string, []string, error) {
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

// Synchronous settings. FULL is the default: NORMAL in WAL mode can lose
// the last commits on power loss, so it is an explicit choice.
const (
	SynchronousFull   = "FULL"
	SynchronousNormal = "NORMAL"
)

// OpenRaw opens a database file with the store's PRAGMAs, without checking
// or migrating its schema: snapshots and upgrades work on databases of
// other versions. With readOnly it opens it query_only where this process
// could write it, and otherwise with SQLite's read-only mode (see
// OpenReadOnly), in which PRAGMA integrity_check does not check CHECK
// constraints: checksConstraints says whether it does.
func OpenRaw(path string, readOnly bool) (db *sql.DB, checksConstraints bool, err error) {
	v := url.Values{}
	v.Add("_pragma", "busy_timeout(5000)")
	if readOnly {
		if !writable(path) {
			db, err := OpenReadOnly(context.Background(), path)
			return db, false, err
		}
		v.Add("_pragma", "query_only(1)")
	}
	db = openDSN(path + "?" + v.Encode())
	db.SetMaxOpenConns(1)
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, false, err
	}
	return db, true, nil
}

// writable reports whether this process can write the file at path and
// create files beside it (a journal, the -wal and -shm).
func writable(path string) bool {
	const wOK = 2 // access(2)'s W_OK
	return syscall.Access(path, wOK) == nil && syscall.Access(filepath.Dir(path), wOK) == nil
}

// openDSN is a pool on a database file's DSN (modernc.org/sqlite's,
// PRAGMAs included) with this store's connections (a statement cache,
// an open that survives a race to switch a new file to WAL), for reads
// of databases of any version (snapshots).
func openDSN(dsn string) *sql.DB {
	return sql.OpenDB(connector{dsn: dsn, drv: &sqlitedriver.Driver{}})
}

// JournalSizeLimit is the journal_size_limit of a file database: when its
// log (the -wal file) starts again from its beginning after a checkpoint,
// a log larger than this is truncated to it. The auto-checkpoint runs at
// 1,000 pages (about 3.9 MiB of log at 4 KiB a page), so a log only
// passes the limit when checkpoints could not keep up (a long reader, a
// full disk's failed writes) and then gives the room back instead of
// keeping it for good.
const JournalSizeLimit = 4 << 20

// buildDSN is the DSN of a writer: the PRAGMAs, busy_timeout first, and
// _txlock=immediate.
func buildDSN(o seam.ConnectParams) (string, []string, error) {
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
	if o.Path != seam.Memory {
		pragmas = append(pragmas, "journal_mode(WAL)", fmt.Sprintf("journal_size_limit(%d)", JournalSizeLimit))
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
func (Store) Classify(err error) seam.Class {
	var c coder
	if !errors.As(err, &c) {
		return ""
	}
	switch c.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_PROTOCOL:
		return seam.ClassBusy
	case sqlite3.SQLITE_FULL:
		return seam.ClassDiskFull
	case sqlite3.SQLITE_IOERR:
		return seam.ClassIO
	case sqlite3.SQLITE_READONLY:
		return seam.ClassReadOnly
	case sqlite3.SQLITE_CANTOPEN:
		return seam.ClassCantOpen
	case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
		return seam.ClassCorrupt
	case sqlite3.SQLITE_NOMEM:
		return seam.ClassNoMemory
	}
	return ""
}

// coder is an error that carries a SQLite result code: modernc.org/sqlite's
// *sqlite.Error, and the errors fault injectors make up in its place.
type coder interface{ Code() int }

// claim takes tasks in claim order. claim_next finds the first candidates
// (the blocked flag, kept by triggers, excludes users at their running
// limit). One task is taken with claim_task; several with claim_tasks, in
// one statement, each user's candidates up to its room (its limit less its
// running count, claim_room): exactly those that taking them one at a
// time would take, since a user is blocked once its count reaches its
// limit. When a user's room left candidates behind and the claim is not
// full, it looks again past them (the triggers have blocked that user).
// The protocol records each claim once its statement has run.
func (Store) Claim(t seam.Tx, p seam.ClaimParams, took func(model.Task) error) error {
	now := model.Millis(t.Now())
	leaseUntil := model.Millis(t.Now().Add(p.Lease))
	for max := p.Max; max > 0; {
		var rows *sql.Rows
		var err error
		if p.Kinds == nil {
			rows, err = t.Query(qClaimNext, sql.Named("now", now), sql.Named("limit", max))
		} else {
			rows, err = t.Query(qClaimNextKinds, sql.Named("now", now), sql.Named("limit", max),
				sql.Named("kinds", seam.KindsArg(p.Kinds)))
		}
		if err != nil {
			return fmt.Errorf("queue: claim: select: %w", err)
		}
		candidates, err := seam.ScanTasks(rows)
		if err != nil {
			return fmt.Errorf("queue: claim: select: %w", err)
		}
		if len(candidates) == 0 {
			return nil
		}
		taken, left, err := sqliteWithinRoom(t, candidates)
		if err != nil || len(taken) == 0 {
			return err
		}
		if err := sqliteTake(t, taken, p.Worker, leaseUntil, now); err != nil {
			return err
		}
		for _, task := range taken {
			if err := took(task); err != nil {
				return err
			}
		}
		max -= len(taken)
		if !left {
			return nil
		}
	}
	return nil
}

// sqliteWithinRoom returns the candidates, in order, that their users'
// running limits let a claim take, and whether it left any behind. One
// candidate needs no reading: it is not blocked, so its user has room.
func sqliteWithinRoom(t seam.Tx, candidates []model.Task) ([]model.Task, bool, error) {
	if len(candidates) == 1 || broken.Pick(broken.NoUserLimit, false, true) {
		return candidates, false, nil
	}
	var users []string
	for _, c := range candidates {
		users = append(users, c.User)
	}
	slices.Sort(users)
	arg, err := json.Marshal(slices.Compact(users))
	if err != nil {
		return nil, false, fmt.Errorf("queue: claim: %w", err)
	}
	rows, err := t.Query(qClaimRoom, sql.Named("users", string(arg)))
	if err != nil {
		return nil, false, fmt.Errorf("queue: claim: room: %w", err)
	}
	defer rows.Close()
	room := map[string]int64{}
	for rows.Next() {
		var user string
		var running, limit int64
		if err := rows.Scan(&user, &running, &limit); err != nil {
			return nil, false, fmt.Errorf("queue: claim: room: %w", err)
		}
		room[user] = math.MaxInt64
		if limit > 0 {
			room[user] = limit - running
		}
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("queue: claim: room: %w", err)
	}
	var taken []model.Task
	left := false
	for _, c := range candidates {
		if room[c.User] <= 0 {
			left = true
			continue
		}
		room[c.User]--
		taken = append(taken, c)
	}
	return taken, left, nil
}

// sqliteTake moves the tasks taken to running for owner: claim_task for
// one, claim_tasks for several.
func sqliteTake(t seam.Tx, taken []model.Task, owner string, leaseUntil, now int64) error {
	if len(taken) == 1 {
		n, err := t.Exec(qClaimTask, sql.Named("seq", taken[0].Seq), sql.Named("owner", owner),
			sql.Named("lease_until", leaseUntil), sql.Named("now", now))
		if err != nil {
			return fmt.Errorf("queue: claim: update: %w", err)
		}
		if n != 1 {
			return fmt.Errorf("queue: claim: update: %s: affected %d rows, expected 1", qClaimTask, n)
		}
		return nil
	}
	seqs := make([]int64, len(taken))
	for i, task := range taken {
		seqs[i] = task.Seq
	}
	arg, err := json.Marshal(seqs)
	if err != nil {
		return fmt.Errorf("queue: claim: %w", err)
	}
	n, err := t.Exec(qClaimTasks, sql.Named("seqs", string(arg)), sql.Named("owner", owner),
		sql.Named("lease_until", leaseUntil), sql.Named("now", now))
	if err != nil {
		return fmt.Errorf("queue: claim: update: %w", err)
	}
	if n != int64(len(taken)) {
		return fmt.Errorf("queue: claim: update: affected %d rows, expected %d", n, len(taken))
	}
	return nil
}

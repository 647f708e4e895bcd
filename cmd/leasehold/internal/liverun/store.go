package liverun

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/queue"
)

// The run's store: SQLite, a file in the run's directory (the default),
// or PostgreSQL, a database of its own on a server, which the workers and
// the server reach over TCP as machines of their own would.

// DemoDatabase is the database a live run on PostgreSQL works in, on the
// server it is given (created the first time), and DemoSchema the schema
// each run makes afresh there (FreshPostgres) and leaves behind for
// inspection. The database the server's URL names is never touched. A
// schema, not a database, is what each run remakes: DROP DATABASE forces a
// checkpoint, which takes seconds on a busy server, and a leasehold schema
// is a whole queue (its workers see nothing else).
const (
	DemoDatabase = "leasehold_demo"
	DemoSchema   = "live"
)

// FreshPostgres makes DemoSchema afresh in DemoDatabase (creating the
// database if need be) on the PostgreSQL server serverURL reaches, and
// returns the URL of it: serverURL naming the database, with the schema
// as its search_path.
func FreshPostgres(ctx context.Context, serverURL string) (string, error) {
	fresh, err := freshSchema(ctx, serverURL, DemoDatabase, DemoSchema)
	if err != nil {
		return "", err
	}
	return withDemoSession(fresh)
}

// withDemoSession returns dbURL with demoSession's settings.
func withDemoSession(dbURL string) (string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", fmt.Errorf("the demo schema's URL is not valid") // freshSchema made it; never reached
	}
	v := u.Query()
	for name, value := range demoSession {
		v.Set(name, value)
	}
	u.RawQuery = v.Encode()
	return u.String(), nil
}

// demoSession are session settings of the live run's connections on
// PostgreSQL, given in its URL (a URL's own settings win over the store's
// defaults): the portfolio's leases are 2 s, under the store's default
// minimum lease of 25 s (its idle-in-transaction timeout plus its TCP
// user timeout), which its workers would refuse. Over loopback, 0.5 s and
// 1 s make a minimum of 1.5 s.
var demoSession = map[string]string{"idle_in_transaction_session_timeout": "500", "tcp_user_timeout": "1000"}

// freshSchema drops and creates schema in database (created if missing)
// on the server serverURL reaches and returns its URL.
func freshSchema(ctx context.Context, serverURL, database, schema string) (string, error) {
	loc, err := queue.ParseLocation(serverURL)
	if err != nil {
		return "", err
	}
	if loc.Kind != queue.StorePostgres {
		return "", fmt.Errorf("%s is not a postgres:// URL", loc)
	}
	u, err := url.Parse(loc.URL)
	if err != nil {
		return "", fmt.Errorf("the server URL %s is not valid", loc) // ParseLocation checked it; never reached
	}
	server := loc.String()
	if err := onServer(ctx, loc.URL, func(conn *pgx.Conn) error {
		var found bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", database).Scan(&found); err != nil || found {
			return err
		}
		_, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{database}.Sanitize())
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database: made meanwhile
			return nil
		}
		return err
	}); err != nil {
		return "", fmt.Errorf("the demo database %s on %s: %w", database, server, err)
	}
	u.Path, u.RawPath = "/"+database, ""
	if err := onServer(ctx, u.String(), func(conn *pgx.Conn) error {
		quoted := pgx.Identifier{schema}.Sanitize()
		_, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+quoted+" CASCADE; CREATE SCHEMA "+quoted)
		return err
	}); err != nil {
		return "", fmt.Errorf("make the demo schema %s in %s on %s afresh: %w", schema, database, server, err)
	}
	v := u.Query()
	v.Set("search_path", schema)
	u.RawQuery = v.Encode()
	return u.String(), nil
}

// onServer runs f on a connection to url, closed afterwards.
func onServer(ctx context.Context, url string, f func(*pgx.Conn) error) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return f(conn)
}

// postgres reports whether the run's database is PostgreSQL's.
func (r *run) postgres() bool {
	loc, err := queue.ParseLocation(r.db)
	return err == nil && loc.Kind == queue.StorePostgres
}

// dbArgs are the flags and environment that name the run's database to a
// process it starts. A URL goes in LEASEHOLD_DB, not on the command line,
// where any user of the machine could read a password in it.
func (r *run) dbArgs() (args, env []string) {
	if r.postgres() {
		return nil, []string{"LEASEHOLD_DB=" + r.db}
	}
	return []string{"--db", r.db}, nil
}

// storeSettings describes the store for the result's settings.
func (r *run) storeSettings() map[string]string {
	if r.postgres() {
		return map[string]string{"store": "postgres: the server and every worker process connect over TCP to " + queue.RedactURL(r.db) +
			" (a schema made afresh for the run)"}
	}
	return map[string]string{"store": "sqlite: one file shared by every process, " + filepath.Base(r.db), "synchronous": queue.SynchronousFull}
}

// lockStorage takes, on a connection of its own, the lock a backup tool
// or a stuck migration would hold, so that every write waits on it:
// SQLite's exclusive lock, or PostgreSQL's EXCLUSIVE lock on the tasks
// table (plain reads go on, as they do in WAL mode). Writers give up after
// their busy timeout (PostgreSQL's lock_timeout). release ends it.
func (r *run) lockStorage(ctx context.Context) (release func() error, err error) {
	if r.postgres() {
		conn, err := pgx.Connect(ctx, r.db)
		if err != nil {
			return nil, fmt.Errorf("open a second connection: %w", err)
		}
		tx, err := conn.Begin(ctx)
		if err == nil {
			_, err = tx.Exec(ctx, "LOCK TABLE tasks IN EXCLUSIVE MODE")
		}
		if err != nil {
			conn.Close(ctx)
			return nil, fmt.Errorf("take the exclusive lock: %w", err)
		}
		return func() error {
			defer conn.Close(ctx)
			return tx.Commit(ctx)
		}, nil
	}
	db, err := sql.Open("sqlite", r.db+"?_pragma=busy_timeout(5000)")
	if err != nil {
		return nil, fmt.Errorf("open a second connection: %w", err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open a second connection: %w", err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
		conn.Close()
		db.Close()
		return nil, fmt.Errorf("take the exclusive lock: %w", err)
	}
	return func() error {
		defer db.Close()
		defer conn.Close()
		_, err := conn.ExecContext(ctx, "COMMIT")
		return err
	}, nil
}

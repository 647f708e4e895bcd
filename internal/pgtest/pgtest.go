// Package pgtest gives tests a PostgreSQL schema of their own, quickly.
//
// The server is named by the environment variable LEASEHOLD_TEST_POSTGRES,
// a URL such as postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable
// (.ci/run starts a server and sets it). When it is unset a test that needs
// the server skips, saying in one line how to enable it, or fails when CI
// is set, so that CI never passes without having run them.
//
// # Usage
//
// Ask for a schema per test, with the function that migrates it:
//
//	url := pgtest.Fresh(t, migrate)
//
// Every test of every package shares one database on the server
// (leasehold_test, created on first use) and gets a schema of its own in
// it, named in the URL's search_path, migrated by the function given, and
// dropped when the test ends. A schema is quicker to make and to drop than
// a database (even one cloned from a template, which copies and syncs
// files), and tests in one database can run in parallel.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Env is the variable that names the test server.
const Env = "LEASEHOLD_TEST_POSTGRES"

// ExampleURL is what Env is set to for the server .ci/run starts.
const ExampleURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// setupTimeout bounds making, migrating or dropping a schema.
const setupTimeout = 2 * time.Minute

// ServerURL returns the test server's URL, or skips the test (fails it,
// with CI set) when Env is unset.
func ServerURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv(Env)
	if u != "" {
		return u
	}
	if os.Getenv("CI") != "" {
		tb.Fatalf("%s is not set and CI is: the PostgreSQL tests must run in CI (.ci/run starts a server)", Env)
		return ""
	}
	tb.Skipf("PostgreSQL tests skipped: set %s=%s (or run .ci/run) to run them", Env, ExampleURL)
	return ""
}

// Database is the database on the test server that holds the tests'
// schemas.
const Database = "leasehold_test"

// Setup migrates the empty schema the URL's search_path names, and closes
// every connection it opened before returning.
type Setup func(ctx context.Context, url string) error

var (
	created sync.Once // Database exists
	counter atomic.Int64
)

// Fresh returns the URL of a new schema, migrated by setup, dropped when
// the test ends.
func Fresh(tb testing.TB, setup Setup) string {
	tb.Helper()
	server := ServerURL(tb)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	var err error
	created.Do(func() { err = ensureDatabase(ctx, server) })
	if err != nil {
		tb.Fatalf("pgtest: database %s: %v", Database, err)
	}
	base, err := WithDatabase(server, Database)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	schema := fmt.Sprintf("t_%d_%d", os.Getpid(), counter.Add(1))
	if err := admin(ctx, base, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+ident(schema)+" CASCADE; CREATE SCHEMA "+ident(schema))
		return err
	}); err != nil {
		tb.Fatalf("pgtest: create schema %s: %v", schema, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		if err := admin(ctx, base, func(conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+ident(schema)+" CASCADE")
			return err
		}); err != nil {
			tb.Errorf("pgtest: drop schema %s: %v", schema, err)
		}
	})
	url, err := WithSchema(base, schema)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	if err := setup(ctx, url); err != nil {
		tb.Fatalf("pgtest: set up schema %s: %v", schema, err)
	}
	return url
}

// SchemaExists reports whether the test database has a schema of that name.
func SchemaExists(ctx context.Context, serverURL, schema string) (bool, error) {
	base, err := WithDatabase(serverURL, Database)
	if err != nil {
		return false, err
	}
	var found bool
	err = admin(ctx, base, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&found)
	})
	return found, err
}

// WithDatabase returns serverURL naming database name instead.
func WithDatabase(serverURL, name string) (string, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", fmt.Errorf("%s is not a URL", Env)
	}
	u.Path = "/" + name
	u.RawPath = ""
	return u.String(), nil
}

// WithSchema returns dbURL with its search_path set to schema alone.
func WithSchema(dbURL, schema string) (string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", fmt.Errorf("%s is not a URL", Env)
	}
	v := u.Query()
	v.Set("search_path", schema)
	u.RawQuery = v.Encode()
	return u.String(), nil
}

// ensureDatabase creates Database unless it exists. Test binaries run in
// parallel, so two may race to create it; the loser finds it made.
func ensureDatabase(ctx context.Context, server string) error {
	return admin(ctx, server, func(conn *pgx.Conn) error {
		var found bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", Database).Scan(&found); err != nil {
			return err
		}
		if found {
			return nil
		}
		_, err := conn.Exec(ctx, "CREATE DATABASE "+ident(Database))
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database
			return nil
		}
		return err
	})
}

// admin runs f on a connection to the database the URL names, closed
// afterwards.
func admin(ctx context.Context, server string, f func(*pgx.Conn) error) error {
	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		return fmt.Errorf("connect to the test server (%s): %w", Env, err)
	}
	defer conn.Close(context.Background())
	return f(conn)
}

// ident quotes a name.
func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

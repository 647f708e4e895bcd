package queue

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
)

// pgConnector opens PostgreSQL connections (pgx's database/sql adapter,
// or a fault injector wrapping it) whose statements take the queue's
// sql.Named arguments: pgx binds by position, so each call's arguments are
// put in the order of the $n its statement was rewritten to
// (rewriteNamed). A statement that is not one of the store's queries takes
// positional arguments only.
type pgConnector struct {
	inner  driver.Connector
	params map[string][]string // rewritten text -> parameter names in $n order
}

// newPGConnector wraps inner for the statements of queries.
func newPGConnector(inner driver.Connector, queries map[string]pgQuery) pgConnector {
	params := make(map[string][]string, len(queries))
	for _, q := range queries {
		params[q.Text] = q.Params
	}
	return pgConnector{inner: inner, params: params}
}

// Connect opens a connection through the wrapped connector.
func (c pgConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &pgConn{inner: conn, params: c.params}, nil
}

// Driver returns the wrapped connector's driver.
func (c pgConnector) Driver() driver.Driver { return c.inner.Driver() }

// errNamedUnknown: named arguments were given for a statement that is not
// one of the store's queries, so their order is not known.
var errNamedUnknown = errors.New("named arguments for a statement not in the store's queries.sql")

// ordered returns args in the order of query's parameters.
func ordered(params map[string][]string, query string, args []driver.NamedValue) ([]driver.NamedValue, error) {
	named := false
	for _, a := range args {
		if a.Name != "" {
			named = true
			break
		}
	}
	if !named {
		return args, nil
	}
	names, ok := params[query]
	if !ok {
		return nil, fmt.Errorf("queue: postgres: %w", errNamedUnknown)
	}
	byName := make(map[string]any, len(args))
	for _, a := range args {
		if a.Name == "" {
			return nil, errors.New("queue: postgres: positional and named arguments mixed in one call")
		}
		if _, dup := byName[a.Name]; dup {
			return nil, fmt.Errorf("queue: postgres: argument %s given twice", a.Name)
		}
		byName[a.Name] = a.Value
	}
	out := make([]driver.NamedValue, len(names))
	for i, name := range names {
		v, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("queue: postgres: statement needs argument %s", name)
		}
		out[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
		delete(byName, name)
	}
	for name := range byName {
		return nil, fmt.Errorf("queue: postgres: statement has no parameter %s", name)
	}
	return out, nil
}

// pgConn is one wrapped connection.
type pgConn struct {
	inner  driver.Conn
	params map[string][]string
}

// Unwrap returns the wrapped connection.
func (c *pgConn) Unwrap() driver.Conn { return c.inner }

func (c *pgConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *pgConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	var s driver.Stmt
	var err error
	if p, ok := c.inner.(driver.ConnPrepareContext); ok {
		s, err = p.PrepareContext(ctx, query)
	} else {
		s, err = c.inner.Prepare(query)
	}
	if err != nil {
		return nil, err
	}
	return &pgStmt{inner: s, query: query, params: c.params}, nil
}

func (c *pgConn) Close() error { return c.inner.Close() }

func (c *pgConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *pgConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if b, ok := c.inner.(driver.ConnBeginTx); ok {
		return b.BeginTx(ctx, opts)
	}
	return nil, errors.New("queue: postgres: driver cannot begin a transaction with options")
}

func (c *pgConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	e, ok := c.inner.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	args, err := ordered(c.params, query, args)
	if err != nil {
		return nil, err
	}
	return e.ExecContext(ctx, query, args)
}

func (c *pgConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := c.inner.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	args, err := ordered(c.params, query, args)
	if err != nil {
		return nil, err
	}
	return q.QueryContext(ctx, query, args)
}

// CheckNamedValue accepts every value: pgx encodes Go values itself.
func (c *pgConn) CheckNamedValue(*driver.NamedValue) error { return nil }

func (c *pgConn) Ping(ctx context.Context) error {
	if p, ok := c.inner.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (c *pgConn) ResetSession(ctx context.Context) error {
	if r, ok := c.inner.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *pgConn) IsValid() bool {
	if v, ok := c.inner.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

// pgStmt is a prepared statement of a wrapped connection.
type pgStmt struct {
	inner  driver.Stmt
	query  string
	params map[string][]string
}

func (s *pgStmt) Close() error { return s.inner.Close() }

// NumInput is -1: the argument count is checked against the statement's
// names in ordered, not by database/sql.
func (s *pgStmt) NumInput() int { return -1 }

func (s *pgStmt) Exec([]driver.Value) (driver.Result, error) {
	return nil, errors.New("queue: postgres: Stmt.Exec without a context is not supported")
}

func (s *pgStmt) Query([]driver.Value) (driver.Rows, error) {
	return nil, errors.New("queue: postgres: Stmt.Query without a context is not supported")
}

func (s *pgStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	e, ok := s.inner.(driver.StmtExecContext)
	if !ok {
		return nil, errors.New("queue: postgres: statement cannot execute with a context")
	}
	args, err := ordered(s.params, s.query, args)
	if err != nil {
		return nil, err
	}
	return e.ExecContext(ctx, args)
}

func (s *pgStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := s.inner.(driver.StmtQueryContext)
	if !ok {
		return nil, errors.New("queue: postgres: statement cannot query with a context")
	}
	args, err := ordered(s.params, s.query, args)
	if err != nil {
		return nil, err
	}
	return q.QueryContext(ctx, args)
}

func (s *pgStmt) CheckNamedValue(*driver.NamedValue) error { return nil }

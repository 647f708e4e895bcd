package queue

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync"
)

// errNamedArgs refuses named arguments to a driver statement that only
// takes positional ones.
var errNamedArgs = errors.New("queue: the driver's statement takes no named arguments")

// stmtCacheMax bounds how many distinct statements one connection keeps.
// The queue's named queries are far fewer; anything past the bound is
// prepared and finalized as usual.
const stmtCacheMax = 256

// cacheConn keeps the statements prepared on one driver connection, by
// their SQL text, for the connection's life. database/sql prepares a
// statement once per transaction when it is first needed inside one, and
// again on the pool once the transaction is over (an in-memory database has
// a single connection, which the transaction holds); with the cache the
// second preparation finds the first one's compiled statement. A statement
// is lent to one user at a time: while it is out, preparing the same text
// again compiles a fresh one.
type cacheConn struct {
	inner driver.Conn

	mu   sync.Mutex
	idle map[string]driver.Stmt
}

var (
	_ driver.Conn               = (*cacheConn)(nil)
	_ driver.ConnPrepareContext = (*cacheConn)(nil)
	_ driver.ConnBeginTx        = (*cacheConn)(nil)
	_ driver.ExecerContext      = (*cacheConn)(nil)
	_ driver.QueryerContext     = (*cacheConn)(nil)
	_ driver.NamedValueChecker  = (*cacheConn)(nil)
	_ driver.SessionResetter    = (*cacheConn)(nil)
	_ driver.Validator          = (*cacheConn)(nil)
	_ driver.Pinger             = (*cacheConn)(nil)
	_ driver.StmtExecContext    = (*cachedStmt)(nil)
	_ driver.StmtQueryContext   = (*cachedStmt)(nil)
	_ driver.NamedValueChecker  = (*cachedStmt)(nil)
	_ driver.ColumnConverter    = converterCachedStmt{}
)

func newCacheConn(inner driver.Conn) *cacheConn {
	return &cacheConn{inner: inner, idle: map[string]driver.Stmt{}}
}

// Unwrap returns the wrapped connection (rawSerializer looks through it).
func (c *cacheConn) Unwrap() driver.Conn { return c.inner }

// Close finalizes every kept statement, then closes the connection.
func (c *cacheConn) Close() error {
	c.mu.Lock()
	idle := c.idle
	c.idle = nil
	c.mu.Unlock()
	for _, s := range idle {
		s.Close()
	}
	return c.inner.Close()
}

func (c *cacheConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

// PrepareContext lends the kept statement for query, or prepares one.
func (c *cacheConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	c.mu.Lock()
	si, ok := c.idle[query]
	if ok {
		delete(c.idle, query)
	}
	c.mu.Unlock()
	if !ok {
		var err error
		if p, is := c.inner.(driver.ConnPrepareContext); is {
			si, err = p.PrepareContext(ctx, query)
		} else {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			si, err = c.inner.Prepare(query)
		}
		if err != nil {
			return nil, err
		}
	}
	s := &cachedStmt{c: c, query: query, inner: si}
	if _, is := si.(driver.ColumnConverter); is {
		return converterCachedStmt{s}, nil
	}
	return s, nil
}

// give takes a statement back when its user closes it: kept if none is
// kept for its text and the cache has room, finalized otherwise.
func (c *cacheConn) give(query string, si driver.Stmt) error {
	c.mu.Lock()
	if c.idle != nil && len(c.idle) < stmtCacheMax {
		if _, taken := c.idle[query]; !taken {
			c.idle[query] = si
			c.mu.Unlock()
			return nil
		}
	}
	c.mu.Unlock()
	return si.Close()
}

func (c *cacheConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *cacheConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if b, ok := c.inner.(driver.ConnBeginTx); ok {
		return b.BeginTx(ctx, opts)
	}
	return c.inner.Begin()
}

func (c *cacheConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if e, ok := c.inner.(driver.ExecerContext); ok {
		return e.ExecContext(ctx, query, args)
	}
	return nil, driver.ErrSkip
}

func (c *cacheConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if q, ok := c.inner.(driver.QueryerContext); ok {
		return q.QueryContext(ctx, query, args)
	}
	return nil, driver.ErrSkip
}

func (c *cacheConn) CheckNamedValue(nv *driver.NamedValue) error {
	if n, ok := c.inner.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (c *cacheConn) ResetSession(ctx context.Context) error {
	if r, ok := c.inner.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *cacheConn) IsValid() bool {
	if v, ok := c.inner.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *cacheConn) Ping(ctx context.Context) error {
	if p, ok := c.inner.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

// cachedStmt is a statement lent by a cacheConn; closing it gives it back.
type cachedStmt struct {
	c     *cacheConn
	query string
	inner driver.Stmt
}

// converterCachedStmt is a cachedStmt whose statement is a
// ColumnConverter: database/sql treats one differently, so the wrapper
// has the method only when the statement does.
type converterCachedStmt struct{ *cachedStmt }

func (s converterCachedStmt) ColumnConverter(idx int) driver.ValueConverter {
	return s.inner.(driver.ColumnConverter).ColumnConverter(idx)
}

func (s *cachedStmt) Close() error  { return s.c.give(s.query, s.inner) }
func (s *cachedStmt) NumInput() int { return s.inner.NumInput() }

func (s *cachedStmt) Exec(args []driver.Value) (driver.Result, error) {
	return s.inner.Exec(args)
}

func (s *cachedStmt) Query(args []driver.Value) (driver.Rows, error) {
	return s.inner.Query(args)
}

func (s *cachedStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	if e, ok := s.inner.(driver.StmtExecContext); ok {
		return e.ExecContext(ctx, args)
	}
	values, err := namedValues(args)
	if err != nil {
		return nil, err
	}
	return s.inner.Exec(values)
}

func (s *cachedStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	if q, ok := s.inner.(driver.StmtQueryContext); ok {
		return q.QueryContext(ctx, args)
	}
	values, err := namedValues(args)
	if err != nil {
		return nil, err
	}
	return s.inner.Query(values)
}

func (s *cachedStmt) CheckNamedValue(nv *driver.NamedValue) error {
	if n, ok := s.inner.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

// namedValues turns positional named values into plain values, for a
// statement without the context methods; a named argument cannot be
// passed that way.
func namedValues(args []driver.NamedValue) ([]driver.Value, error) {
	out := make([]driver.Value, len(args))
	for i, a := range args {
		if a.Name != "" {
			return nil, errNamedArgs
		}
		out[i] = a.Value
	}
	return out, nil
}

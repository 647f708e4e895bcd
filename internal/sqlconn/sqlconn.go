// Package sqlconn is the base of the layers leasehold puts between
// database/sql and a driver: the queue's statement cache, the simulator's
// pool of in-memory databases, the storage fault injector. A layer embeds
// Conn (and its statements Stmt), whose methods pass every call to the
// wrapped value, and overrides only what it changes; a Lender lends the
// statements prepared on one connection by their SQL text.
//
// Conn's Prepare and Begin call the wrapped connection, not the layer: a
// layer that overrides PrepareContext or BeginTx overrides Prepare or
// Begin too (database/sql calls the context variants of a connection that
// has them, as every Conn has).
package sqlconn

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync"
)

// ErrNamedArgs refuses named arguments to a driver statement that takes
// only positional ones.
var ErrNamedArgs = errors.New("sqlconn: the driver's statement takes no named arguments")

// Conn passes every call to Inner, falling back as database/sql would
// where Inner lacks an optional interface.
type Conn struct {
	Inner driver.Conn
}

var (
	_ driver.Conn               = (*Conn)(nil)
	_ driver.ConnPrepareContext = (*Conn)(nil)
	_ driver.ConnBeginTx        = (*Conn)(nil)
	_ driver.ExecerContext      = (*Conn)(nil)
	_ driver.QueryerContext     = (*Conn)(nil)
	_ driver.NamedValueChecker  = (*Conn)(nil)
	_ driver.SessionResetter    = (*Conn)(nil)
	_ driver.Validator          = (*Conn)(nil)
	_ driver.Pinger             = (*Conn)(nil)
)

// Unwrap returns the wrapped connection, for code that reaches a driver's
// own methods through sql.Conn.Raw.
func (c *Conn) Unwrap() driver.Conn { return c.Inner }

// Close closes the wrapped connection.
func (c *Conn) Close() error { return c.Inner.Close() }

// Prepare prepares on the wrapped connection.
func (c *Conn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

// PrepareContext prepares on the wrapped connection.
func (c *Conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if p, ok := c.Inner.(driver.ConnPrepareContext); ok {
		return p.PrepareContext(ctx, query)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return c.Inner.Prepare(query)
}

// Begin begins on the wrapped connection.
func (c *Conn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

// BeginTx begins on the wrapped connection.
func (c *Conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if b, ok := c.Inner.(driver.ConnBeginTx); ok {
		return b.BeginTx(ctx, opts)
	}
	return c.Inner.Begin() //nolint:staticcheck // the fallback database/sql itself takes
}

// ExecContext runs query on the wrapped connection, or answers
// driver.ErrSkip (database/sql then prepares it).
func (c *Conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if e, ok := c.Inner.(driver.ExecerContext); ok {
		return e.ExecContext(ctx, query, args)
	}
	return nil, driver.ErrSkip
}

// QueryContext runs query on the wrapped connection, or answers
// driver.ErrSkip.
func (c *Conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if q, ok := c.Inner.(driver.QueryerContext); ok {
		return q.QueryContext(ctx, query, args)
	}
	return nil, driver.ErrSkip
}

// CheckNamedValue lets a driver that binds arguments itself (pgx: arrays
// such as []string) check each; for one that does not it answers
// driver.ErrSkip, and database/sql converts the value by default.
func (c *Conn) CheckNamedValue(nv *driver.NamedValue) error {
	if n, ok := c.Inner.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

// ResetSession resets the wrapped connection's session.
func (c *Conn) ResetSession(ctx context.Context) error {
	if r, ok := c.Inner.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

// IsValid asks the wrapped connection.
func (c *Conn) IsValid() bool {
	if v, ok := c.Inner.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

// Ping pings the wrapped connection.
func (c *Conn) Ping(ctx context.Context) error {
	if p, ok := c.Inner.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

// Stmt passes every call to Inner, falling back as database/sql would.
type Stmt struct {
	Inner driver.Stmt
}

var (
	_ driver.StmtExecContext   = (*Stmt)(nil)
	_ driver.StmtQueryContext  = (*Stmt)(nil)
	_ driver.NamedValueChecker = (*Stmt)(nil)
)

// Close closes the wrapped statement.
func (s *Stmt) Close() error { return s.Inner.Close() }

// NumInput is the wrapped statement's.
func (s *Stmt) NumInput() int { return s.Inner.NumInput() }

// Exec runs the wrapped statement.
func (s *Stmt) Exec(args []driver.Value) (driver.Result, error) {
	return s.Inner.Exec(args) //nolint:staticcheck // driver.Stmt's own method
}

// Query runs the wrapped statement.
func (s *Stmt) Query(args []driver.Value) (driver.Rows, error) {
	return s.Inner.Query(args) //nolint:staticcheck // driver.Stmt's own method
}

// ExecContext runs the wrapped statement, through Exec where it has no
// context variant (positional arguments only).
func (s *Stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	if e, ok := s.Inner.(driver.StmtExecContext); ok {
		return e.ExecContext(ctx, args)
	}
	values, err := namedValues(args)
	if err != nil {
		return nil, err
	}
	return s.Inner.Exec(values) //nolint:staticcheck // the fallback database/sql itself takes
}

// QueryContext runs the wrapped statement, through Query where it has no
// context variant.
func (s *Stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	if q, ok := s.Inner.(driver.StmtQueryContext); ok {
		return q.QueryContext(ctx, args)
	}
	values, err := namedValues(args)
	if err != nil {
		return nil, err
	}
	return s.Inner.Query(values) //nolint:staticcheck // the fallback database/sql itself takes
}

// CheckNamedValue asks the wrapped statement, or answers driver.ErrSkip.
func (s *Stmt) CheckNamedValue(nv *driver.NamedValue) error {
	if n, ok := s.Inner.(driver.NamedValueChecker); ok {
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
			return nil, ErrNamedArgs
		}
		out[i] = a.Value
	}
	return out, nil
}

// Lender keeps the statements prepared on one connection by their SQL
// text and lends each to one user at a time: while one is out, preparing
// the same text again prepares a fresh one; closing a lent statement gives
// it back, kept if none is kept for its text and there is room, closed
// otherwise. The zero Lender is not usable: use NewLender.
type Lender struct {
	max int // statements kept at most; 0 for no bound

	mu     sync.Mutex
	idle   map[string]driver.Stmt
	closed bool
}

// NewLender returns a Lender that keeps at most max statements (0: no
// bound).
func NewLender(max int) *Lender { return &Lender{max: max, idle: map[string]driver.Stmt{}} }

// Lend returns the kept statement for query, or one prepare makes, as a
// statement whose Close gives it back. A statement that is a
// driver.ColumnConverter is lent as one.
func (l *Lender) Lend(query string, prepare func() (driver.Stmt, error)) (driver.Stmt, error) {
	l.mu.Lock()
	si, ok := l.idle[query]
	if ok {
		delete(l.idle, query)
	}
	l.mu.Unlock()
	if !ok {
		var err error
		if si, err = prepare(); err != nil {
			return nil, err
		}
	}
	s := &lent{Stmt: Stmt{Inner: si}, l: l, query: query}
	if _, is := si.(driver.ColumnConverter); is {
		return converterLent{s}, nil
	}
	return s, nil
}

// Kept reports how many statements the Lender keeps.
func (l *Lender) Kept() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.idle)
}

// give takes a statement back.
func (l *Lender) give(query string, si driver.Stmt) error {
	l.mu.Lock()
	if !l.closed && (l.max == 0 || len(l.idle) < l.max) {
		if _, kept := l.idle[query]; !kept {
			l.idle[query] = si
			l.mu.Unlock()
			return nil
		}
	}
	l.mu.Unlock()
	return si.Close()
}

// Close closes every kept statement; a statement given back after is
// closed at once.
func (l *Lender) Close() {
	l.mu.Lock()
	idle := l.idle
	l.idle, l.closed = map[string]driver.Stmt{}, true
	l.mu.Unlock()
	for _, s := range idle {
		s.Close()
	}
}

// lent is a statement a Lender lent; closing it gives it back.
type lent struct {
	Stmt
	l     *Lender
	query string
}

func (s *lent) Close() error { return s.l.give(s.query, s.Inner) }

// converterLent is a lent statement whose statement is a ColumnConverter:
// database/sql treats one differently, so the wrapper has the method only
// when the statement does.
type converterLent struct{ *lent }

func (s converterLent) ColumnConverter(idx int) driver.ValueConverter {
	return s.Inner.(driver.ColumnConverter).ColumnConverter(idx)
}

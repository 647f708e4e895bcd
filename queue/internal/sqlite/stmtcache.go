package sqlite

import (
	"context"
	"database/sql/driver"

	"github.com/leasehold/leasehold/internal/sqlconn"
)

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
// is lent to one user at a time (sqlconn.Lender): while it is out,
// preparing the same text again compiles a fresh one. Every other call
// goes to the connection as it is (sqlconn.Conn).
type cacheConn struct {
	sqlconn.Conn
	stmts *sqlconn.Lender
}

func newCacheConn(inner driver.Conn) *cacheConn {
	return &cacheConn{Conn: sqlconn.Conn{Inner: inner}, stmts: sqlconn.NewLender(stmtCacheMax)}
}

// Close finalizes every kept statement, then closes the connection.
func (c *cacheConn) Close() error {
	c.stmts.Close()
	return c.Inner.Close()
}

func (c *cacheConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

// PrepareContext lends the kept statement for query, or prepares one.
func (c *cacheConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return c.stmts.Lend(query, func() (driver.Stmt, error) { return c.Conn.PrepareContext(ctx, query) })
}

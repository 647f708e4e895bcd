package main

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync/atomic"

	"modernc.org/sqlite"
)

// pageCounter is the SQLite driver under a leasehold run that counts the
// pages each commit writes to the WAL (SQLite's per-connection
// SQLITE_DBSTATUS_CACHE_WRITE, reset as each transaction begins and read
// as it commits). Pages per commit are what a commit costs beyond its
// fsync, one WAL frame each, and unlike a rate the machine's load does
// not move them.
type pageCounter struct {
	inner sqlite.Driver
	pages atomic.Int64
}

var errNoStatus = errors.New("bench: the SQLite connection reports no page counts")

func (d *pageCounter) Open(name string) (driver.Conn, error) {
	c, err := d.inner.Open(name)
	if err != nil {
		return nil, err
	}
	if _, ok := c.(sqlite.DBStatus); !ok {
		c.Close()
		return nil, errNoStatus
	}
	return &countedConn{Conn: c, d: d}, nil
}

// countedConn passes everything to its connection, counting the pages
// of each commit.
type countedConn struct {
	driver.Conn
	d *pageCounter
}

func (c *countedConn) status(reset bool) int64 {
	n, _, _ := c.Conn.(sqlite.DBStatus).Status(sqlite.DBStatusCacheWrite, reset)
	return int64(n)
}

func (c *countedConn) BeginTx(ctx context.Context, o driver.TxOptions) (driver.Tx, error) {
	tx, err := c.Conn.(driver.ConnBeginTx).BeginTx(ctx, o)
	if err != nil {
		return nil, err
	}
	c.status(true)
	return &countedTx{Tx: tx, c: c}, nil
}

func (c *countedConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
}

func (c *countedConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (c *countedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
}

func (c *countedConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

type countedTx struct {
	driver.Tx
	c *countedConn
}

func (t *countedTx) Commit() error {
	err := t.Tx.Commit()
	t.c.d.pages.Add(t.c.status(true))
	return err
}

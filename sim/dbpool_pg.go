package sim

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/internal/sqlconn"
)

// A PostgreSQL store shares its server with other programs, and a world
// must not see them: a connection the server refuses because it has too
// many clients (SQLSTATE 53300) depends on what else runs there, not on
// the seed, so a world told of it would take another path and its trace
// would depend on the machine's load. Storage faults are the schedule's
// alone (the injector decides them before any real connection is
// dialled). So the store keeps such refusals below the worlds:
//
//   - it holds its own connections to at most its share (connsMax): the
//     owner's lock connection, the admin connection that makes and resets
//     schemas, and the worlds' queues' connections; a world's connection
//     waits for one of the store's to close (a world holds one at a time,
//     so waiting worlds always have running ones to wait for);
//   - it dials again a connection the server refused for having too many
//     clients, waiting between tries on the store's clock (the real one
//     outside tests: the wait is for other programs' connections), up to
//     refusedWaitMax in all, after which the refusal is returned: a world
//     records it as an anomaly, never as a verdict on the queue.

// The store's connection budget and its waits for a server that refuses
// connections.
const (
	// PostgresConnsDefault is a store's share of the server's connections
	// when PostgresOptions sets none: a tenth of PostgreSQL's default
	// max_connections.
	PostgresConnsDefault = 10
	// refusedWaitMin and refusedWaitMax bound the wait between two dials
	// the server refused; refusedWaitTotalMax bounds the waits in all.
	refusedWaitMin      = 50 * time.Millisecond
	refusedWaitMax      = 2 * time.Second
	refusedWaitTotalMax = 2 * time.Minute
)

// pgStateTooManyClients is the SQLSTATE of a connection the server refused
// for having too many clients (too_many_connections), in all or for the
// role or the database.
const pgStateTooManyClients = "53300"

// refusedForClients reports whether err is a connection the server refused
// for having too many clients.
func refusedForClients(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == pgStateTooManyClients
}

// pgConns counts a store's connections and dials them again when the
// server refuses them for having too many clients.
type pgConns struct {
	slots   chan struct{} // one token per open connection, up to the store's share
	clock   clockwork.Clock
	refused atomic.Int64 // dials the server refused for having too many clients
}

func newPGConns(connsMax int, clock clockwork.Clock) *pgConns {
	return &pgConns{slots: make(chan struct{}, connsMax), clock: clock}
}

// hold waits for room for one more connection and returns what gives it
// back, once however often it is called.
func (p *pgConns) hold() (release func()) {
	p.slots <- struct{}{}
	var once sync.Once
	return func() { once.Do(func() { <-p.slots }) }
}

// dial runs open until the server stops refusing it for having too many
// clients, waiting between tries, and returns its result; any other error
// at once. With no clock it tries once.
func (p *pgConns) dial(ctx context.Context, open func() error) error {
	wait, waited := refusedWaitMin, time.Duration(0)
	for {
		err := open()
		if refusedForClients(err) {
			p.refused.Add(1)
		}
		if err == nil || !refusedForClients(err) || p.clock == nil || waited+wait > refusedWaitTotalMax {
			if err != nil && refusedForClients(err) && waited > 0 {
				return fmt.Errorf("sim: the postgres server refused a connection for %s: %w", waited, err)
			}
			return err
		}
		select {
		case <-p.clock.After(wait):
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		}
		waited += wait
		wait = min(2*wait, refusedWaitMax)
	}
}

// driver returns a driver.Driver that opens inner's connections within the
// store's share, dialling again on a refusal for too many clients.
func (p *pgConns) driver(inner driver.Driver) driver.Driver {
	return &pgConnDriver{conns: p, inner: inner}
}

// pgConnDriver is a driver.Driver whose connections count against a
// store's share (pgConns).
type pgConnDriver struct {
	conns *pgConns
	inner driver.Driver
}

// Open waits for room in the store's share, then opens a connection of the
// inner driver, dialling again while the server refuses it for having too
// many clients.
func (d *pgConnDriver) Open(name string) (driver.Conn, error) {
	release := d.conns.hold()
	var c driver.Conn
	err := d.conns.dial(context.Background(), func() (err error) {
		c, err = d.inner.Open(name)
		return err
	})
	if err != nil {
		release()
		return nil, err
	}
	return &countedConn{Conn: sqlconn.Conn{Inner: c}, release: release}, nil
}

// countedConn is a connection that gives its room in the store's share
// back when it is closed; every other call goes to the connection as it
// is (sqlconn.Conn).
type countedConn struct {
	sqlconn.Conn
	release func()
}

// Close closes the connection and gives its room back.
func (c *countedConn) Close() error {
	defer c.release()
	return c.Conn.Close()
}

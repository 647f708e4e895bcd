package sim

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

// refusingDriver is a driver.Driver whose first refusals opens fail as
// the server refuses a client when it has too many (SQLSTATE 53300), or
// with err when set; it counts the connections open at once.
type refusingDriver struct {
	mu       sync.Mutex
	refusals int   // opens still to refuse; negative: every one
	err      error // what a refusal returns; nil: 53300
	dials    int
	open     int
	openMax  int
}

func (d *refusingDriver) Open(string) (driver.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dials++
	if d.refusals != 0 {
		d.refusals--
		if d.err != nil {
			return nil, d.err
		}
		return nil, &pgconn.PgError{Severity: "FATAL", Code: pgStateTooManyClients, Message: "sorry, too many clients already"}
	}
	d.open++
	d.openMax = max(d.openMax, d.open)
	return &refusingConn{d: d}, nil
}

type refusingConn struct{ d *refusingDriver }

func (c *refusingConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("not here") }
func (c *refusingConn) Begin() (driver.Tx, error)           { return nil, errors.New("not here") }
func (c *refusingConn) Close() error {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	c.d.open--
	return nil
}

// openAsync opens a connection of drv in a goroutine and returns where its
// outcome arrives.
func openAsync(drv driver.Driver) <-chan error {
	done := make(chan error, 1)
	go func() {
		c, err := drv.Open("db")
		if err == nil {
			err = c.Close()
		}
		done <- err
	}()
	return done
}

// TestPGConnsRedialRefusals: a connection the server refused for having
// too many clients is dialled again after a wait on the store's clock, and
// the world's open returns the connection it finally got.
func TestPGConnsRedialRefusals(t *testing.T) {
	clock := clockwork.NewFakeClock()
	inner := &refusingDriver{refusals: 3}
	done := openAsync(newPGConns(2, clock).driver(inner))
	for range 3 {
		require.NoError(t, clock.BlockUntilContext(t.Context(), 1)) // waiting after a refusal
		clock.Advance(refusedWaitMax)
	}
	require.NoError(t, <-done)
	require.Equal(t, 4, inner.dials)
	require.Zero(t, inner.open)
}

// TestPGConnsRefusalsBounded: a server that keeps refusing is waited for
// refusedWaitTotalMax in all, then its refusal is returned, as it is at
// once without a clock, and so is any other error; a refused open gives
// its room back.
func TestPGConnsRefusalsBounded(t *testing.T) {
	clock := clockwork.NewFakeClock()
	inner := &refusingDriver{refusals: -1}
	conns := newPGConns(1, clock)
	done := openAsync(conns.driver(inner))
	waits := 0 // the waits that fit in refusedWaitTotalMax
	for wait, waited := refusedWaitMin, time.Duration(0); waited+wait <= refusedWaitTotalMax; wait = min(2*wait, refusedWaitMax) {
		waited += wait
		waits++
	}
	for range waits {
		require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
		clock.Advance(refusedWaitMax)
	}
	err := <-done
	require.True(t, refusedForClients(err), "%v", err)
	require.ErrorContains(t, err, "refused a connection for")
	require.Equal(t, waits+1, inner.dials)

	inner = &refusingDriver{refusals: 1}
	require.True(t, refusedForClients(<-openAsync(newPGConns(1, nil).driver(inner))))
	require.Equal(t, 1, inner.dials, "without a clock a refusal is returned at once")

	inner = &refusingDriver{refusals: 1, err: &pgconn.PgError{Severity: "FATAL", Code: "28P01", Message: "password authentication failed"}}
	err = <-openAsync(conns.driver(inner)) // the slot the first refused open held is free again
	require.ErrorContains(t, err, "28P01")
	require.Equal(t, 1, inner.dials, "only a refusal for too many clients is dialled again")
	require.NoError(t, <-openAsync(conns.driver(inner)))
}

// TestPGConnsBound: however many worlds open at once, the store's
// connections never number more than its share.
func TestPGConnsBound(t *testing.T) {
	const connsMax, worlds, opens = 3, 12, 50
	inner := &refusingDriver{}
	drv := newPGConns(connsMax, nil).driver(inner)
	var wg sync.WaitGroup
	for range worlds {
		wg.Go(func() {
			for range opens {
				c, err := drv.Open("db")
				if err == nil {
					err = c.Close()
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, worlds*opens, inner.dials)
	require.LessOrEqual(t, inner.openMax, connsMax)
	require.Zero(t, inner.open)
	require.Empty(t, drv.(*pgConnDriver).conns.slots, "every room given back")
}

// TestRefusedForClients reads the SQLSTATE through wrapping, and no other.
func TestRefusedForClients(t *testing.T) {
	refused := &pgconn.PgError{Code: pgStateTooManyClients}
	require.True(t, refusedForClients(fmt.Errorf("sim: connect: %w", refused)))
	require.False(t, refusedForClients(&pgconn.PgError{Code: "57P03"}))
	require.False(t, refusedForClients(context.Canceled))
}

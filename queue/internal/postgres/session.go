package postgres

import (
	"context"
	"database/sql/driver"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue/internal/seam"
)

// The session settings of every connection the PostgreSQL store opens
// (the pool's, with or without Options.Driver, and the wake listener's),
// so that a session cut off from its client cannot hold what other
// sessions wait for. A worker partitioned from the server in the middle
// of a write transaction leaves its session "idle in transaction",
// holding its rows' locks, the events' shared advisory lock and perhaps
// admission's lock; left alone, the server keeps it until TCP gives up
// (about two hours by default). So:
//
//   - idle_in_transaction_session_timeout ends such a session, rolling its
//     transaction back and releasing its locks;
//   - TCP keepalives and a user timeout, on the server's side of the
//     connection (tcp_keepalives_*, tcp_user_timeout) and on the client's
//     (the dialer's keepalive and TCP_USER_TIMEOUT), drop a connection
//     whose peer is gone, whether it sits silent or has data unanswered.
//
// Neither idle_session_timeout nor statement_timeout is set: the wake
// listener sits idle for as long as nothing is ready, and a follower's
// lock wait (events_after_lock) waits for the stuck session, both by
// design. Each setting the URL gives itself is kept.

// IdleInTransactionTimeout is the store's
// idle_in_transaction_session_timeout when neither Options nor the URL
// sets one: how long a session may sit idle inside a transaction before
// the server ends it. One stuck session stops other sessions' writes that
// need its locks for at most this long.
const IdleInTransactionTimeout = 5 * time.Second

// The store's TCP keepalive, on both sides of its connections: after
// pgKeepAliveIdle of silence a probe every pgKeepAliveInterval, and the
// connection dropped after pgKeepAliveCount unanswered. The user timeout
// (TCPUserTimeout) drops a connection whose data, probes
// included, stays unacknowledged that long; Linux then bounds the probes
// by it too. It is the keepalive's bound: idle, then count probes.
const (
	pgKeepAliveIdle     = 5 * time.Second
	pgKeepAliveInterval = 5 * time.Second
	pgKeepAliveCount    = 3
	TCPUserTimeout      = pgKeepAliveIdle + pgKeepAliveCount*pgKeepAliveInterval
)

// The server's names of the session settings, as a URL may give them.
const (
	pgIdleInTransaction = "idle_in_transaction_session_timeout"
	pgKeepAlivesIdle    = "tcp_keepalives_idle"
	pgKeepAlivesInt     = "tcp_keepalives_interval"
	pgKeepAlivesCount   = "tcp_keepalives_count"
	pgUserTimeout       = "tcp_user_timeout"
)

// pgSession is the session settings of a PostgreSQL store's connections.
// The zero value (a SQLite store's) sets nothing.
type pgSession struct {
	idleInTransaction time.Duration // 0: off
	keepAlive         net.KeepAliveConfig
	userTimeout       time.Duration
}

// pgSessionOf returns the session settings for a connection whose URL
// gave params (pgx's RuntimeParams) and whose store was opened with the
// idle-in-transaction timeout idle (Options.IdleInTransactionTimeout).
// A setting the URL gives wins; one it gives that is not a duration (or,
// for the count, a whole number) is refused, naming it.
func pgSessionOf(params map[string]string, idle time.Duration) (pgSession, error) {
	s := pgSession{idleInTransaction: IdleInTransactionTimeout, userTimeout: TCPUserTimeout,
		keepAlive: net.KeepAliveConfig{Enable: true, Idle: pgKeepAliveIdle, Interval: pgKeepAliveInterval, Count: pgKeepAliveCount}}
	switch {
	case idle == seam.NoIdleInTransactionTimeout:
		s.idleInTransaction = 0
	case idle > 0:
		s.idleInTransaction = idle
	}
	for _, d := range []struct {
		name string
		unit time.Duration
		into *time.Duration
	}{
		{pgIdleInTransaction, time.Millisecond, &s.idleInTransaction},
		{pgKeepAlivesIdle, time.Second, &s.keepAlive.Idle},
		{pgKeepAlivesInt, time.Second, &s.keepAlive.Interval},
		{pgUserTimeout, time.Millisecond, &s.userTimeout},
	} {
		value, ok := params[d.name]
		if !ok {
			continue
		}
		v, err := pgDuration(value, d.unit)
		if err != nil {
			return pgSession{}, &model.ValidationError{Field: "db", Problem: fmt.Sprintf("the URL's %s: %v", d.name, err)}
		}
		*d.into = v
	}
	if value, ok := params[pgKeepAlivesCount]; ok {
		n, err := strconv.Atoi(strings.TrimSpace(value))
		if err != nil || n < 0 {
			return pgSession{}, &model.ValidationError{Field: "db", Problem: fmt.Sprintf("the URL's %s: %q is not a whole number", pgKeepAlivesCount, value)}
		}
		s.keepAlive.Count = n
	}
	return s, nil
}

// pgDurationUnits are the units PostgreSQL takes in a time setting.
var pgDurationUnits = map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second,
	"min": time.Minute, "h": time.Hour, "d": 24 * time.Hour}

// pgDuration reads a time setting as PostgreSQL does: a whole number in
// the setting's unit, or followed by one of pgDurationUnits.
func pgDuration(value string, unit time.Duration) (time.Duration, error) {
	v := strings.TrimSpace(value)
	digits := strings.TrimRight(v, "abcdefghijklmnopqrstuvwxyz ")
	if suffix := strings.TrimSpace(v[len(digits):]); suffix != "" {
		u, ok := pgDurationUnits[suffix]
		if !ok {
			return 0, fmt.Errorf("%q has a unit PostgreSQL does not take", value)
		}
		unit = u
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n < 0 || n > int64(24*time.Hour/unit) {
		return 0, fmt.Errorf("%q is not a duration from 0 to a day", value)
	}
	return time.Duration(n) * unit, nil
}

// apply puts the settings into cfg: the server's in its runtime
// parameters, the client's in its dialer.
func (s pgSession) apply(cfg *pgx.ConnConfig) {
	cfg.RuntimeParams[pgIdleInTransaction] = strconv.FormatInt(s.idleInTransaction.Milliseconds(), 10)
	cfg.RuntimeParams[pgKeepAlivesIdle] = strconv.FormatInt(wholeSeconds(s.keepAlive.Idle), 10)
	cfg.RuntimeParams[pgKeepAlivesInt] = strconv.FormatInt(wholeSeconds(s.keepAlive.Interval), 10)
	cfg.RuntimeParams[pgKeepAlivesCount] = strconv.Itoa(s.keepAlive.Count)
	cfg.RuntimeParams[pgUserTimeout] = strconv.FormatInt(s.userTimeout.Milliseconds(), 10)
	dialer := &net.Dialer{KeepAliveConfig: s.keepAlive, Control: userTimeoutControl(s.userTimeout)}
	if cfg.ConnectTimeout > 0 {
		dialer.Timeout = cfg.ConnectTimeout
	}
	cfg.DialFunc = dialer.DialContext
}

// wholeSeconds is d in whole seconds, rounded up (the server's keepalive
// settings are whole seconds).
func wholeSeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

// leaseMin is the shortest lease a live worker may take over a store with
// these settings: the longest a session cut off inside a transaction can
// hold locks that other sessions' writes wait for, the idle timeout, plus
// the longest the server takes to find its client gone while answering,
// the user timeout. Zero for a SQLite store.
func (s pgSession) leaseMin() time.Duration { return s.idleInTransaction + s.userTimeout }

// settings names the session settings, for evidence.
func (s pgSession) settings() []string {
	return []string{
		fmt.Sprintf("%s=%dms", pgIdleInTransaction, s.idleInTransaction.Milliseconds()),
		fmt.Sprintf("tcp_keepalives=%s/%s/%d", s.keepAlive.Idle, s.keepAlive.Interval, s.keepAlive.Count),
		fmt.Sprintf("%s=%dms", pgUserTimeout, s.userTimeout.Milliseconds()),
	}
}

// configConnector opens connections for a store whose Options.Driver is
// set: the driver (a fault injector wrapping stdlib's) is given the name
// under which cfg, the store's whole configuration (session settings and
// dialer included), is registered with stdlib, so that a connection
// opened through it is the one the store would open without it. Closing
// the pool unregisters cfg.
type configConnector struct {
	name string
	drv  driver.Driver
}

func newConfigConnector(cfg *pgx.ConnConfig, drv driver.Driver) configConnector {
	return configConnector{name: stdlib.RegisterConnConfig(cfg), drv: drv}
}

func (c configConnector) Connect(context.Context) (driver.Conn, error) { return c.drv.Open(c.name) }
func (c configConnector) Driver() driver.Driver                        { return c.drv }

// Close unregisters the configuration; database/sql calls it from
// DB.Close.
func (c configConnector) Close() error {
	stdlib.UnregisterConnConfig(c.name)
	return nil
}

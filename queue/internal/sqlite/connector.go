package sqlite

import (
	"context"
	"database/sql/driver"
	"errors"

	sqlitedriver "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// openAttempts bounds how often a connection's open is tried when it fails
// with SQLITE_BUSY.
//
// Every connection runs journal_mode(WAL) as it opens (a DSN PRAGMA). On a
// new file that switches the file to WAL, which needs its exclusive lock,
// taken from inside the read that looks at the file's header. When several
// processes open a new file at once, a switch that meets another
// connection's transaction loses that upgrade, and SQLite reports
// SQLITE_BUSY at once rather than waiting (waiting could deadlock). The
// next attempt's read waits, under the busy timeout set just before it,
// for the other transaction to end, and then finds the file in WAL mode
// already, which needs no lock: one retry is enough, and the third attempt
// is margin. The bound is small because each attempt may wait out the busy
// timeout when another process holds the lock for long. Any other error is
// returned at once.
const openAttempts = 3

// isBusy reports whether err is SQLite's SQLITE_BUSY (any extended code).
func isBusy(err error) bool {
	var se *sqlitedriver.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// connector opens connections to the SQLite database named by dsn
// (modernc.org/sqlite's DSN, PRAGMAs included) through a chosen driver,
// caching prepared statements per connection and surviving processes
// racing to switch a new file to WAL.
type connector struct {
	dsn string
	drv driver.Driver
}

// Connect opens a connection with a statement cache (see cacheConn),
// trying again an open that lost a race to switch a new file to WAL (see
// openAttempts).
func (c connector) Connect(context.Context) (driver.Conn, error) {
	var dc driver.Conn
	var err error
	for range openAttempts {
		dc, err = c.drv.Open(c.dsn)
		if err == nil || !isBusy(err) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	return newCacheConn(dc), nil
}

func (c connector) Driver() driver.Driver { return c.drv }

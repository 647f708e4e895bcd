package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// walAttempts bounds how often EnableWAL retries a switch that lost a race.
const walAttempts = 10

// EnableWAL puts the database file behind db into WAL mode, which the file
// then keeps for every later connection.
//
// Switching a new file to WAL needs its exclusive lock, taken from inside
// the read that looks at the file's header. When several processes open a
// new file at once, all but one of them lose that upgrade, and SQLite
// reports SQLITE_BUSY at once rather than waiting (waiting could deadlock).
// EnableWAL tries again: the next attempt's read waits, under the busy
// timeout, for the winner's switch to finish, and then finds the file in
// WAL mode already. Any other error, or a file that will not take WAL (a
// file system without shared memory), is returned.
func EnableWAL(ctx context.Context, db *sql.DB) error {
	var mode string
	var err error
	for range walAttempts {
		err = db.QueryRowContext(ctx, "PRAGMA journal_mode=WAL").Scan(&mode)
		if err == nil || !isBusy(err) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("queue: set journal_mode WAL: %w", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("queue: set journal_mode WAL: the database stayed in %q mode", mode)
	}
	return nil
}

// isBusy reports whether err is SQLite's SQLITE_BUSY (any extended code).
func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

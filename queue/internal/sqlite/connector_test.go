package sqlite

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	sqlitedriver "modernc.org/sqlite"
)

// TestConnectorSurvivesARaceToSwitchANewFile opens new files in WAL mode
// from several pools at once, as worker processes started together do,
// each reading and then writing the file once open. Without the retry, an
// open whose switch to WAL meets another pool's transaction loses the lock
// upgrade and fails with SQLITE_BUSY (it did in every run of this test).
func TestConnectorSurvivesARaceToSwitchANewFile(t *testing.T) {
	for round := range 20 {
		path := filepath.Join(t.TempDir(), fmt.Sprintf("race%d.db", round))
		dbs := make([]*sql.DB, 6)
		for i := range dbs {
			db := sql.OpenDB(connector{dsn: path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)", drv: &sqlitedriver.Driver{}})
			t.Cleanup(func() { db.Close() })
			dbs[i] = db
		}
		errs := make([]error, len(dbs))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, db := range dbs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				// Read and write, as an opening queue does, so that later
				// switchers meet transactions holding the file.
				for range 20 {
					var n int
					if errs[i] = db.QueryRow("SELECT COUNT(*) FROM sqlite_master").Scan(&n); errs[i] != nil {
						return
					}
				}
				if _, errs[i] = db.Exec("CREATE TABLE IF NOT EXISTS t (v INTEGER)"); errs[i] != nil {
					return
				}
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "round %d pool %d", round, i)
		}
		var mode string
		require.NoError(t, dbs[0].QueryRow("PRAGMA journal_mode").Scan(&mode))
		require.Equal(t, "wal", mode)
	}
}

// TestIsBusyTellsALockedDatabaseFromOtherErrors: a write refused because
// another connection holds the lock is busy; a bad statement is not.
func TestIsBusyTellsALockedDatabaseFromOtherErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "busy.db")
	holder := sql.OpenDB(connector{dsn: path + "?_pragma=journal_mode(WAL)", drv: &sqlitedriver.Driver{}})
	defer holder.Close()
	_, err := holder.Exec("CREATE TABLE t (v INTEGER)")
	require.NoError(t, err)
	tx, err := holder.Begin()
	require.NoError(t, err)
	defer tx.Rollback()
	_, err = tx.Exec("INSERT INTO t VALUES (1)")
	require.NoError(t, err)

	other, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(0)")
	require.NoError(t, err)
	defer other.Close()
	_, err = other.Exec("INSERT INTO t VALUES (2)")
	require.Error(t, err)
	require.True(t, isBusy(err), "%v", err)
	require.True(t, isBusy(fmt.Errorf("wrapped: %w", err)))

	_, err = other.Exec("INSERT INTO missing VALUES (1)")
	require.Error(t, err)
	require.False(t, isBusy(err), "%v", err)
	require.False(t, isBusy(nil))
}

package sim

import (
	"context"
	"database/sql/driver"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"modernc.org/sqlite"

	"github.com/leasehold/leasehold/scenarios"
)

// headerCounters are the byte ranges of the database header a commit
// rewrites: the file change counter, the version-valid-for number and the
// number of the SQLite version that wrote it.
var headerCounters = [][2]int{{24, 28}, {92, 100}}

// sameAsImage reports whether db is image byte for byte but for the
// header's counters.
func sameAsImage(t *testing.T, image, db []byte) {
	t.Helper()
	require.Equal(t, len(image), len(db), "the database is the image's length")
	a, b := append([]byte(nil), image...), append([]byte(nil), db...)
	for _, r := range headerCounters {
		copy(a[r[0]:r[1]], make([]byte, r[1]-r[0]))
		copy(b[r[0]:r[1]], make([]byte, r[1]-r[0]))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("the restored database differs from the image at byte %d (page %d): %x, want %x", i, i/4096+1, b[i:min(i+16, len(b))], a[i:min(i+16, len(a))])
		}
	}
}

// A pooled connection given back and opened again holds the image again,
// even after writes that grew the database past it, and lends the
// statements it compiled before.
func TestPooledDatabaseIsRestoredToTheImage(t *testing.T) {
	image, err := migratedImage()
	require.NoError(t, err)
	p, err := newDBPool(&sqlite.Driver{}, image)
	require.NoError(t, err)
	ctx := context.Background()
	const dsn = ":memory:?_pragma=foreign_keys(1)"

	dc, err := p.Open(dsn)
	require.NoError(t, err)
	c := dc.(*pooledConn)
	first, err := c.inner.Serialize()
	require.NoError(t, err)
	require.Equal(t, image, first, "a new connection starts as the image")

	const insert = "INSERT INTO settings (key, value) VALUES (?, ?)"
	st, err := c.PrepareContext(ctx, insert)
	require.NoError(t, err)
	filler := make([]byte, 3000)
	for i := range 200 { // far more pages than the image has
		_, err := st.(driver.StmtExecContext).ExecContext(ctx, []driver.NamedValue{{Ordinal: 1, Value: fmt.Sprintf("filler-%d", i)},
			{Ordinal: 2, Value: string(filler)}})
		require.NoError(t, err)
	}
	require.NoError(t, st.Close())
	require.Equal(t, 1, c.stmts.Kept(), "the compiled statement is kept")
	grown, err := c.inner.Serialize()
	require.NoError(t, err)
	require.Greater(t, len(grown), len(image))
	require.NoError(t, c.Close())

	again, err := p.Open(dsn)
	require.NoError(t, err)
	require.Same(t, c, again.(*pooledConn), "the idle connection is reused")
	restored, err := c.inner.Serialize()
	require.NoError(t, err)
	sameAsImage(t, image, restored)
	st, err = again.(*pooledConn).PrepareContext(ctx, insert)
	require.NoError(t, err)
	require.Equal(t, 0, c.stmts.Kept(), "the compiled statement is lent again, across worlds")
	var rows driver.Rows
	rows, err = c.inner.QueryContext(ctx, "SELECT COUNT(*) FROM settings WHERE key LIKE 'filler-%'", nil)
	require.NoError(t, err)
	vals := make([]driver.Value, 1)
	require.NoError(t, rows.Next(vals))
	require.NoError(t, rows.Close())
	require.EqualValues(t, 0, vals[0], "the rows written before are gone")
	rows, err = c.inner.QueryContext(ctx, "PRAGMA integrity_check", nil)
	require.NoError(t, err)
	require.NoError(t, rows.Next(vals))
	require.NoError(t, rows.Close())
	require.Equal(t, "ok", vals[0], "every page reads back as a sound b-tree (none decoded before the restore)")
	require.NoError(t, st.Close())
	require.NoError(t, again.Close())

	other, err := p.Open(":memory:")
	require.NoError(t, err)
	require.NotSame(t, c, other.(*pooledConn), "a connection serves only its own DSN's settings")
	other.(*pooledConn).discard()
}

// Worlds on reused databases run as on fresh ones: a seed gives the same
// fingerprint first in a process (a new database) and after other seeds
// (a restored one), in every scenario.
func TestReusedDatabaseSameFingerprint(t *testing.T) {
	for _, name := range scenarios.Names() {
		sc, err := scenarios.Get(name)
		require.NoError(t, err)
		p, err := worldDBs()
		require.NoError(t, err)
		p.mu.Lock()
		idle := p.idle
		p.idle = map[string][]*pooledConn{} // the next world opens a new database
		p.mu.Unlock()
		fresh := Run(Config{Scenario: sc, Seed: 11})
		for seed := uint64(1); seed <= 3; seed++ {
			Run(Config{Scenario: sc, Seed: seed})
		}
		reused := Run(Config{Scenario: sc, Seed: 11})
		require.True(t, fresh.Pass, "%s: %s", name, fresh.Summary())
		require.Equal(t, fresh.Fingerprint, reused.Fingerprint, name)
		p.mu.Lock()
		for dsn, cs := range idle {
			p.idle[dsn] = append(p.idle[dsn], cs...)
		}
		p.mu.Unlock()
	}
}

// serialChildEnv marks the process TestSerialSQLite starts as its child.
const serialChildEnv = "LEASEHOLD_SIM_SERIAL_CHILD"

// With SerialSQLiteEnv set (a sweep process), the library is
// single-threaded, the pool lends one connection at a time and refuses a
// second, and seeds give the fingerprints they give with the library
// serialised. The child runs in a process of its own: the configuration
// is the process's, for good.
func TestSerialSQLite(t *testing.T) {
	sc := scenarios.Portfolio()
	if os.Getenv(serialChildEnv) == "1" {
		p, err := worldDBs()
		require.NoError(t, err)
		require.True(t, p.serial, "the library is single-threaded")
		const dsn = ":memory:"
		first, err := p.Open(dsn)
		require.NoError(t, err)
		_, err = p.Open(dsn)
		require.ErrorIs(t, err, errSerialBusy, "a second connection while one is lent")
		require.NoError(t, first.Close())
		again, err := p.Open(dsn)
		require.NoError(t, err, "a connection once the first is given back")
		require.NoError(t, again.Close())
		for seed := uint64(1); seed <= 2; seed++ {
			r := Run(Config{Scenario: sc, Seed: seed})
			require.True(t, r.Pass, r.Summary())
			fmt.Printf("fingerprint %d %s\n", seed, r.Fingerprint)
		}
		return
	}
	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(self, "-test.run", "^TestSerialSQLite$", "-test.count", "1")
	cmd.Env = append(SweepProcessEnv(os.Environ()), serialChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	for seed := uint64(1); seed <= 2; seed++ {
		want := fmt.Sprintf("fingerprint %d %s", seed, Run(Config{Scenario: sc, Seed: seed}).Fingerprint)
		require.True(t, strings.Contains(string(out), want), "the child's output %s lacks %q", out, want)
	}
}

package postgres

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/queue/internal/seam"
)

// TestOnceEach: a connect failure says each attempt once: pgx's second
// try without TLS fails word for word as the first, and the line a user
// reads names it once; different attempts are all kept.
func TestOnceEach(t *testing.T) {
	attempt := "127.0.0.1:1 (127.0.0.1): dial error: dial tcp 127.0.0.1:1: connect: connection refused"
	twice := "failed to connect to `user=u database=x`:\n\t" + attempt + "\n\t" + attempt
	require.Equal(t, "failed to connect to `user=u database=x`: "+attempt, onceEach(twice))
	different := "failed to connect to `user=u database=x`:\n\ta: refused\n\tb: refused"
	require.Equal(t, different, onceEach(different), "two different attempts are both kept")
	require.Equal(t, "no backtick here", onceEach("no backtick here"))
}

// TestLockTimeout: the busy timeout is the pool's lock_timeout, in whole
// milliseconds and at least one; zero leaves the server's.
func TestLockTimeout(t *testing.T) {
	for _, busy := range []struct {
		in   time.Duration
		want string
		set  bool
	}{{0, "", false}, {seam.NoBusyTimeout, "1ms", true}, {1500 * time.Millisecond, "1500ms", true}, {time.Microsecond, "1ms", true}} {
		got, set := pgLockTimeout(busy.in)
		require.Equal(t, busy.want, got, busy.in.String())
		require.Equal(t, busy.set, set, busy.in.String())
	}
}

// texts gives Listen the two statements it runs.
type texts struct{}

func (texts) Query(seam.Query, ...any) (*sql.Rows, error) {
	return nil, errors.New("not run by Listen")
}

func (texts) Text(q seam.Query) string {
	return map[seam.Query]seam.Query{qReadyListen: seam.Name("LISTEN " + ReadyChannel), qReadySchema: seam.Name("SELECT current_schema()")}[q].String()
}

// TestListenerCarriesTheSessionSettings: the wake listener's connection,
// opened outside the pool, carries the pool's session settings, read
// back from the server and from the client's socket (SO_KEEPALIVE,
// TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT, TCP_USER_TIMEOUT), and names
// itself in pg_stat_activity.
func TestListenerCarriesTheSessionSettings(t *testing.T) {
	ctx := context.Background()
	l, err := Store{}.Listen(ctx, texts{}, seam.ConnectParams{Path: pgtest.ServerURL(t)})
	require.NoError(t, err)
	conn := l.(pgListener).conn
	defer l.Close(ctx)
	var got []string
	for _, name := range []string{"idle_in_transaction_session_timeout", "tcp_keepalives_idle", "tcp_keepalives_interval",
		"tcp_keepalives_count", "tcp_user_timeout", "statement_timeout", "idle_session_timeout", "application_name"} {
		var v string
		require.NoError(t, conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v))
		got = append(got, name+"="+v)
	}
	require.Equal(t, []string{"idle_in_transaction_session_timeout=5s", "tcp_keepalives_idle=5", "tcp_keepalives_interval=5",
		"tcp_keepalives_count=3", "tcp_user_timeout=20000", "statement_timeout=0", "idle_session_timeout=0",
		"application_name=leasehold wake"}, got)

	socket := pgtest.SocketOptions(t, conn.PgConn().Conn())
	require.Equal(t, []int{1, 5, 5, 3, 20000}, socket)
}

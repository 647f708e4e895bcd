package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/queue/internal/seam"
)

// ReadyChannel is the PostgreSQL notification channel notified after a
// commit that made a task claimable, with its schema as the payload.
const ReadyChannel = "leasehold_ready"

// wakeConnectTimeout bounds one attempt to open the listening connection.
// How soon a link that went silent (a cut cable, a partition) is found
// dead is the store's keepalive, as for every connection (session.go).
var wakeConnectTimeout = 10 * time.Second

// NotifyReady sends, as one statement that is its own transaction, the
// notification that a task became claimable: ready_notify. Its commit
// does not wait for the WAL flush (synchronous_commit off, for it alone):
// PostgreSQL holds one cluster-wide lock from a notifying transaction's
// pre-commit to the end of its commit, and a notification is a hint that
// a crash may lose anyway.
func (Store) NotifyReady(q seam.Querier) error {
	rows, err := q.Query(qReadyNotify)
	if err == nil {
		for rows.Next() {
		}
		err = rows.Err()
		if cerr := rows.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("queue: notify workers: %w", err)
	}
	return nil
}

// Listen opens a connection of its own to the database p names, listens
// on ReadyChannel and returns it, to wait for the notifications of its
// schema.
func (Store) Listen(ctx context.Context, r seam.Runner, p seam.ConnectParams) (seam.Listener, error) {
	loc, cfg, session, err := pgConfig(p)
	if err != nil {
		return nil, fmt.Errorf("queue: wake listener: %w", err)
	}
	cfg.ConnectTimeout = wakeConnectTimeout
	cfg.RuntimeParams["application_name"] = wakeApplicationName(cfg.RuntimeParams["search_path"])
	session.apply(cfg) // again, for the dialer's timeout
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("queue: wake listener: connect to %s: %w", loc.String(), err)
	}
	var schema string
	if _, err = conn.Exec(ctx, r.Text(qReadyListen)); err == nil {
		err = conn.QueryRow(ctx, r.Text(qReadySchema)).Scan(&schema)
	}
	if err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("queue: wake listener: listen on %s: %w", loc.String(), err)
	}
	return pgListener{conn: conn, schema: schema}, nil
}

// pgListener is a connection listening on ReadyChannel for the
// notifications of one schema.
type pgListener struct {
	conn   *pgx.Conn
	schema string
}

// Wait returns at the next notification of the schema, or with the error
// that ended the connection or ctx.
func (l pgListener) Wait(ctx context.Context) error {
	for {
		n, err := l.conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("queue: wake listener: %w", err)
		}
		if n.Channel == ReadyChannel && n.Payload == l.schema {
			return nil
		}
	}
}

// Close closes the connection.
func (l pgListener) Close(ctx context.Context) { l.conn.Close(ctx) }

// wakeApplicationName is the application_name of a wake listener's
// connection, as pg_stat_activity shows it: "leasehold wake" and the URL's
// search_path, if it names one.
func wakeApplicationName(searchPath string) string {
	if searchPath == "" {
		return "leasehold wake"
	}
	return "leasehold wake " + searchPath
}

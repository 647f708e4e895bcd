// Package postgres is the PostgreSQL store of the queue (pgx v5 through
// its database/sql adapter), for workers on many machines sharing one
// database. It implements seam.Store; the protocol that runs over it is
// package queue's, which this package never imports.
package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/leasehold/leasehold/internal/broken"
	"github.com/leasehold/leasehold/internal/redact"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue/internal/seam"
)

//go:embed sql
var files embed.FS

// Store is the PostgreSQL store. Writes at
// READ COMMITTED are grouped within a process (group commit, group.go),
// so that one commit carries the concurrent writes of a process's
// workers. Across processes, no write waits on a hot row: the per-user
// counters are rows of changes (user_deltas), and the claim takes a
// batch with FOR UPDATE SKIP LOCKED and then its users' counter rows,
// also skipping the rows others hold, to hold the per-user running limit
// against every other claimer (see claim). A group the database still
// rolls back as a conflict (a deadlock over task rows, say) tells every
// member ErrNotApplied of ClassConflict, which writeRetrying runs again.
type Store struct{}

var _ seam.Store = Store{}

// Dialect is "postgres".
func (Store) Dialect() string { return Dialect }

// Dialect names the PostgreSQL store.
const Dialect = "postgres"

// Positional: pgx takes $n parameters only.
func (Store) Positional() bool { return true }

// pgGroupLanes is how many group commits of one process run at once on
// PostgreSQL. One: since a group's CompleteAndClaim claims are one store
// claim (batch.go: mergeClaims), a group of ten slots' writes costs about
// as many round trips as a group of one, so one lane makes the largest
// groups and the fewest commits (docs/PERF.md has the lanes measured).
const pgGroupLanes = 1

// handles reports whether path is a postgres:// or postgresql:// URL.
func (Store) Handles(path string) bool {
	scheme, _, ok := strings.Cut(path, "://")
	return ok && (strings.EqualFold(scheme, "postgres") || strings.EqualFold(scheme, "postgresql"))
}

// SQLFiles is this package's sql/.
func (Store) SQLFiles() fs.FS {
	sub, err := fs.Sub(files, "sql")
	if err != nil {
		panic("queue: embedded postgres sql: " + err.Error()) // fs.Sub fails only on an invalid name
	}
	return sub
}

// pgConnsDefault is the pool size when Options.MaxConns is not set.
const pgConnsDefault = 8

// connect opens a pool on the URL in o.Path, every connection with the
// store's session settings (session.go). The settings it reports are
// for evidence and hold no password. Options.Driver, when set, must open
// pgx connections through stdlib's default driver (a fault injector
// wrapping stdlib.GetDefaultDriver()): it is given the name of the whole
// configuration registered with stdlib, so that its connections carry
// the same settings and dialer.
func (Store) Connect(ctx context.Context, o seam.ConnectParams) (seam.Pool, error) {
	if o.Image {
		return seam.Pool{}, &model.ValidationError{Field: "db", Problem: "a database image is SQLite's"}
	}
	loc, cfg, session, err := pgConfig(o)
	if err != nil {
		return seam.Pool{}, err
	}
	if lt, ok := pgLockTimeout(o.BusyTimeout); ok {
		if _, set := cfg.RuntimeParams["lock_timeout"]; !set { // the URL's own setting wins
			cfg.RuntimeParams["lock_timeout"] = lt
		}
	}
	if o.ReadOnly {
		// Every transaction of the pool is READ ONLY: a write fails with
		// read_only_sql_transaction (ClassReadOnly), and nothing migrates.
		cfg.RuntimeParams["default_transaction_read_only"] = "on"
	}
	var db *sql.DB
	if o.Driver != nil {
		db = sql.OpenDB(newConfigConnector(cfg, o.Driver))
	} else {
		db = sql.OpenDB(stdlib.GetConnector(*cfg))
	}
	conns := o.MaxConns
	if conns <= 0 {
		conns = pgConnsDefault
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return seam.Pool{}, fmt.Errorf("queue: connect to %s: %w", loc.String(), scrubbed(err, loc.URL))
	}
	settings := append([]string{"server=" + loc.String(), "isolation=read committed", fmt.Sprintf("max_conns=%d", conns)},
		session.settings()...)
	if lt := cfg.RuntimeParams["lock_timeout"]; lt != "" {
		settings = append(settings, "lock_timeout="+lt)
	}
	if o.ReadOnly {
		settings = append(settings, "default_transaction_read_only=on")
	}
	return seam.Pool{DB: db, Settings: settings, LeaseMin: session.leaseMin()}, nil
}

// pgConfig reads the URL in o.Path: its location, pgx's configuration of
// it, and the session settings of its connections, applied to the
// configuration.
func pgConfig(o seam.ConnectParams) (location, *pgx.ConnConfig, pgSession, error) {
	u, err := ParseURL(o.Path)
	if err != nil {
		return location{}, nil, pgSession{}, &model.ValidationError{Field: "db", Problem: err.Error()}
	}
	loc := location{URL: u}
	cfg, err := pgx.ParseConfig(loc.URL)
	if err != nil {
		return location{}, nil, pgSession{}, &model.ValidationError{Field: "db", Problem: redact.Passwords("the URL "+loc.String()+" is not valid", loc.URL)}
	}
	session, err := pgSessionOf(cfg.RuntimeParams, o.IdleInTransactionTimeout)
	if err != nil {
		return location{}, nil, pgSession{}, err
	}
	session.apply(cfg)
	return loc, cfg, session, nil
}

// location is a database's URL, password included, for connecting only;
// its String is the URL as it may be printed.
type location struct{ URL string }

// String is the URL with any password replaced by xxxxx.
func (l location) String() string { return redact.URL(l.URL) }

// pgLockTimeout is the lock_timeout that Options.BusyTimeout asks of
// PostgreSQL: how long a statement waits for a lock another transaction
// holds before failing with lock_not_available (ClassBusy). Zero leaves
// the server's setting (by default, waiting as long as it takes);
// NoBusyTimeout fails at once (a millisecond: zero would mean no limit).
func pgLockTimeout(busy time.Duration) (string, bool) {
	switch {
	case busy == seam.NoBusyTimeout:
		return "1ms", true
	case busy > 0:
		return fmt.Sprintf("%dms", max(busy.Milliseconds(), 1)), true
	}
	return "", false
}

// scrubbed returns err with every password rawURL holds removed from its
// message (pgx names the host, user and database, never the password, but
// nothing that reaches a log may depend on that), each connect attempt
// said once.
func scrubbed(err error, rawURL string) error {
	return redact.Message(err, onceEach(redact.Passwords(err.Error(), rawURL)))
}

// onceEach returns a connect failure's message with each attempt said
// once: pgx tries a host again without TLS when sslmode is prefer (the
// default) and puts each attempt's error on a line of its own, and the two
// are then word for word the same. One attempt left goes on the first line.
func onceEach(msg string) string {
	head, rest, found := strings.Cut(msg, "`:")
	if !found || !strings.Contains(rest, "\n") {
		return msg
	}
	var attempts []string
	for _, line := range strings.Split(rest, "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !slices.Contains(attempts, line) {
			attempts = append(attempts, line)
		}
	}
	if len(attempts) == 1 {
		return head + "`: " + attempts[0]
	}
	return head + "`:\n\t" + strings.Join(attempts, "\n\t")
}

// classify maps PostgreSQL's SQLSTATE codes and pgx's connection failures
// to storage classes.
func (Store) Classify(err error) seam.Class {
	var st sqlStater
	if errors.As(err, &st) && st.SQLState() != "" {
		return classOfSQLState(st.SQLState())
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.As(err, &connectErr), errors.As(err, &netErr),
		errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrConnDone),
		errors.Is(err, io.ErrUnexpectedEOF), pgconn.SafeToRetry(err):
		return seam.ClassConnection
	}
	return ""
}

// sqlStater is an error that carries a SQLSTATE: pgx's *pgconn.PgError (a
// server's error), and the errors fault injectors make up in its place.
type sqlStater interface{ SQLState() string }

// classOfSQLState is the storage class of a SQLSTATE, or "" for an error
// that is no storage failure (a syntax error is a bug, and is reported as
// itself).
func classOfSQLState(code string) seam.Class {
	switch code {
	case "40001", "40P01", seam.StateAdmissionBusy: // serialization_failure, deadlock_detected, admission busy
		return seam.ClassConflict
	case "23505": // unique_violation: a key raced by another connection
		return seam.ClassConstraint
	case "53100": // disk_full
		return seam.ClassDiskFull
	case "53200": // out_of_memory
		return seam.ClassNoMemory
	case "53300", "55P03", "57014": // too_many_connections, lock_not_available, query_canceled
		return seam.ClassBusy
	case "58030": // io_error
		return seam.ClassIO
	case "25006": // read_only_sql_transaction
		return seam.ClassReadOnly
	case "XX001", "XX002": // data_corrupted, index_corrupted
		return seam.ClassCorrupt
	case "3D000", "28000", "28P01", "42501": // no such database, auth, privilege
		return seam.ClassCantOpen
	}
	switch {
	case strings.HasPrefix(code, "08"), code == "57P01", code == "57P02", code == "57P03", code == "25P03":
		// connection exceptions, server shutting down or starting, and a
		// session the server ended for idling inside a transaction
		// (idle_in_transaction_session_timeout: its client went quiet)
		return seam.ClassConnection
	case strings.HasPrefix(code, "53"):
		return seam.ClassNoMemory // insufficient resources
	}
	return ""
}

// Claim takes up to p.Max tasks in claim order, in one statement
// (claim_batch: functions.sql's claim, which says how it holds the
// per-user running limit without waiting on another claimer), and calls
// took with each, as it was, in claim order.
func (Store) Claim(tx seam.Tx, p seam.ClaimParams, took func(model.Task) error) error {
	now := tx.Now()
	rows, err := tx.Query(qClaimBatch, sql.Named("now", model.Millis(now)), sql.Named("max", p.Max),
		sql.Named("owner", p.Worker), sql.Named("lease_until", model.Millis(now.Add(p.Lease))),
		sql.Named("kinds", seam.KindsArg(p.Kinds)))
	if err != nil {
		return fmt.Errorf("queue: claim: %w", err)
	}
	taken, err := seam.ScanTasks(rows)
	if err != nil {
		return fmt.Errorf("queue: claim: %w", err)
	}
	for _, task := range taken {
		if err := took(task); err != nil {
			return err
		}
	}
	return nil
}

// CompleteAndClaim runs a fused group as complete_and_claim, one
// statement and its own transaction (functions.sql). A server's error
// (a *pgconn.PgError, or an injected one with a SQLSTATE) rolled the
// statement's transaction back, unless it is a connection failure or a
// shutdown (SQLSTATE class 08, 57P01-57P03), after which the statement
// may have committed; an error without a SQLSTATE (a lost or refused
// connection) leaves it unknown too, unless pgx says nothing was sent.
func (Store) CompleteAndClaim(r seam.Runner, f seam.FusedParams) ([]model.Task, bool, error) {
	claims, err := json.Marshal(f.Claims)
	if err != nil {
		return nil, false, fmt.Errorf("complete and claim: %w", err)
	}
	events, err := json.Marshal(f.Events)
	if err != nil {
		return nil, false, fmt.Errorf("complete and claim: %w", err)
	}
	rows, err := r.Query(qCompleteAndClaim, sql.Named("claims", string(claims)),
		sql.Named("events", string(events)), sql.Named("now", model.Millis(f.Now)), sql.Named("max", f.Claim.Max),
		sql.Named("owner", f.Claim.Worker), sql.Named("lease_until", model.Millis(f.Now.Add(f.Claim.Lease))),
		sql.Named("scope", f.Scope), sql.Named("kinds", seam.KindsArg(f.Claim.Kinds)))
	if err == nil {
		var taken []model.Task
		// The statement has committed once its rows are read to the end
		// and closed without error: a failed commit is reported there.
		taken, err = seam.ScanTasks(rows)
		if cerr := rows.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("complete_and_claim: %w", cerr)
		}
		if err == nil {
			return taken, false, nil
		}
	}
	var st sqlStater
	if errors.As(err, &st) && st.SQLState() == pgStateFusedMismatch {
		return nil, false, seam.ErrFusedMismatch
	}
	return nil, pgMayHaveCommitted(err), err
}

// SubmitOne runs a submit as submit_one (functions.sql), one statement:
// alone, its own transaction, or inside a group's. Alone, its failures
// are read as CompleteAndClaim's: a server's error rolled it back, a
// lost connection may have left it committed.
func (Store) SubmitOne(q seam.Querier, p seam.SubmitParams) (seam.SubmitOutcome, bool, error) {
	n := p.Request
	rows, err := q.Query(qSubmitOne, sql.Named("id", p.ID), sql.Named("user", n.User),
		sql.Named("key", n.Key), sql.Named("hash", n.Hash), sql.Named("kind", n.Kind), sql.Named("payload", n.Payload),
		sql.Named("priority", n.Priority), sql.Named("run_at", model.Millis(p.RunAt)),
		sql.Named("deadline", model.Millis(n.Deadline)), sql.Named("now", model.Millis(p.Now)),
		sql.Named("cost_budget", n.CostBudget), sql.Named("steps_max", n.StepsMax),
		sql.Named("schedule_id", n.ScheduleID), sql.Named("schedule_run", n.ScheduleRun),
		sql.Named("actor", p.Actor), sql.Named("scope", p.Scope), sql.Named("timely", p.Timely))
	if err == nil {
		var out seam.SubmitOutcome
		var taskID sql.NullString
		switch {
		case !rows.Next():
			err = rows.Err()
			if err == nil {
				err = errors.New("submit_one returned no row")
			}
		default:
			err = rows.Scan(&out.Kind, &taskID, &out.N, &out.Limit)
		}
		// The statement has committed once its rows are closed without
		// error: a failed commit is reported there.
		if cerr := rows.Close(); err == nil && cerr != nil {
			err = cerr
		}
		if err == nil {
			out.TaskID = taskID.String
			return out, false, nil
		}
		err = fmt.Errorf("submit_one: %w", err)
	}
	return seam.SubmitOutcome{}, pgMayHaveCommitted(err), err
}

// pgStateFusedMismatch is the SQLSTATE complete_and_claim fails with when
// a claim did not match (functions.sql).
const pgStateFusedMismatch = "LH001"

// pgMayHaveCommitted reports whether a statement run as its own
// transaction that failed with err may have committed (see
// CompleteAndClaim).
func pgMayHaveCommitted(err error) bool {
	var st sqlStater
	if errors.As(err, &st) && st.SQLState() != "" {
		code := st.SQLState()
		lost := strings.HasPrefix(code, "08") || code == "57P01" || code == "57P02" || code == "57P03"
		return broken.Pick(broken.FusedLostReadsNotApplied, lost, false)
	}
	return broken.Pick(broken.FusedLostReadsNotApplied, !pgconn.SafeToRetry(err), false)
}

// pgFolded is the history of the PostgreSQL store's pre-release
// migrations 0001-0021, which the baseline (0001_baseline.sql) replaced:
// each file's name and SHA-256 as schema_migrations records them.
var pgFolded = seam.Folded{
	Migrations: []seam.AppliedMigration{
		{Version: 1, Name: "0001_init.sql", Checksum: "2d91203602c3ac18a3b1f5539564051eeae3473910869a7830f086ba8ec052cf"},
		{Version: 2, Name: "0002_prune.sql", Checksum: "66cdbd08678cf70e9980764d0e4c6f5785bc3b0aefdbfcfa7ada89085b0df784"},
		{Version: 3, Name: "0003_user_deltas.sql", Checksum: "61b73a8c10e723110e942cd00c2af532fc221ee327901b6c7ee0fbf8b3debab8"},
		{Version: 4, Name: "0004_statement_counters.sql", Checksum: "44d08a39e0118fd0f22a63a29c9e97107ceeb5e5907208cb5a580b496e7ade17"},
		{Version: 5, Name: "0005_claim_function.sql", Checksum: "433626bf1a15ce0fa0c417a0abd77bd2626007e0fa96bdb11b90518d3c054185"},
		{Version: 6, Name: "0006_lean_hot_path.sql", Checksum: "bfcfb780e294140e9e50921ea7243af50b68ec30fb0b0b3b35734a32d1104f87"},
		{Version: 7, Name: "0007_claim_without_bitmaps.sql", Checksum: "a5c44a1ecf6442816bc5abdbe9824402b16a2dbe6e31f9cd1193c807fe6ebeca"},
		{Version: 8, Name: "0008_fused_group_counts_itself.sql", Checksum: "0cc9eca48c757a560249a6a02fc5a99eb21b0efc799765e7e41bc4921288117a"},
		{Version: 9, Name: "0009_claim_lets_submits_pass.sql", Checksum: "267645c1144105b79dbbef8de8181018780a67304f6737b0ba713a4908059273"},
		{Version: 10, Name: "0010_fused_claim_inline.sql", Checksum: "da145f19d54134313ea23d7e25dc7969c4018eae7a53743009dcd60f37f547c0"},
		{Version: 11, Name: "0011_submit_in_one_statement.sql", Checksum: "fca3ec9f83430a8e80f078c9fb4887e29b3071d482131bd6f96581e698233560"},
		{Version: 12, Name: "0012_claim_by_one_scan.sql", Checksum: "5020454198394458b49ef633459394cea0480c19984978ff79c94234e315bc78"},
		{Version: 13, Name: "0013_task_keys.sql", Checksum: "10613a044899c9cdce2e81c5417f5c27b60ff61e2eb7cee545713ace320d9dc1"},
		{Version: 14, Name: "0014_fused_group_fewer_statements.sql", Checksum: "e33f743714df063e50eb8ebad1f31af99fe3d463c5800218fe129f2af99eccd6"},
		{Version: 15, Name: "0015_lone_submit_counts_itself.sql", Checksum: "2e56528d6ba26b27a1a88d181a8dbdecdd88dd3171af3ee53c9531b999fe39b6"},
		{Version: 16, Name: "0016_submit_folds_user_deltas.sql", Checksum: "0f49ae3ded3d722794cb40014f4bec9a68c2ead8fd9ec9856070dd7e19147aa6"},
		{Version: 17, Name: "0017_claim_reads_its_users.sql", Checksum: "f451a9118f4beab72978974d7def6227308a799f070b255014537e1155ed5539"},
		{Version: 18, Name: "0018_submit_counts_by_state.sql", Checksum: "826dea232147e5304479894bf29e0db3b831d879bc3ed8c8133df2e12feaea62"},
		{Version: 19, Name: "0019_column_rules_as_domains.sql", Checksum: "724905e31b17295d6bc8787609af284e07988f419b44ff25b9c3805a9256b3ff"},
		{Version: 20, Name: "0020_active_count_by_index.sql", Checksum: "132a8ea2f426c96f0845f59c4d9715353a009006df7f575da0253df772512bde"},
		{Version: 21, Name: "0021_completion_clears_last_error.sql", Checksum: "ebd26403b4a920b14d780534ce8ed3694af7d0c7a0e91051a467a5b5b6b48d40"},
	},
	// 0021 changed a function only: a database at 20 holds the baseline's
	// schema too.
	SchemaFrom: 20,
	// The functions whose broken-variant parameters functions.sql dropped.
	Dropped: []string{
		"DROP FUNCTION IF EXISTS claim_batch(BIGINT, BIGINT, BIGINT, INTEGER, TEXT, BIGINT, BOOLEAN)",
		"DROP FUNCTION IF EXISTS complete_and_claim(JSONB, JSONB, BIGINT, BIGINT, BIGINT, INTEGER, TEXT, BIGINT, BOOLEAN, BOOLEAN, TEXT)",
		"DROP FUNCTION IF EXISTS submit_one(TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, BIGINT, BIGINT, BIGINT, BIGINT, BIGINT, TEXT, BIGINT, TEXT, TEXT, BOOLEAN, BOOLEAN, BIGINT)",
	},
	Build: "3be390c",
}

// Folded is the pre-release history the baseline replaced.
func (Store) Folded() *seam.Folded { return &pgFolded }

// Capabilities: group commit in one lane, fused groups, lone submits
// and a batch's new tasks in one statement each, LISTEN/NOTIFY wake-ups,
// counters as rows of changes, and transactions that commit out of event
// order.
func (b Store) Capabilities() seam.Capabilities {
	return seam.Capabilities{Groups: true, GroupLanes: pgGroupLanes, Fuse: b, Submit: b, SubmitBatch: true, Notify: b,
		CounterRows: true, CommitsOutOfOrder: true, RunningOverActive: true}
}

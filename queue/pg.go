package queue

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

	"github.com/leasehold/leasehold/internal/redact"
	"github.com/leasehold/leasehold/model"
)

//go:embed sql/postgres
var postgresFiles embed.FS

func init() { registerBackend(pgBackend{}) }

// pgBackend is the PostgreSQL store (pgx v5 through its database/sql
// adapter), for workers on many machines sharing one database. Writes at
// READ COMMITTED are grouped within a process (group commit, group.go),
// so that one commit carries the concurrent writes of a process's
// workers. Across processes, no write waits on a hot row: the per-user
// counters are rows of changes (user_deltas), and the claim takes a
// batch with FOR UPDATE SKIP LOCKED and then its users' counter rows,
// also skipping the rows others hold, to hold the per-user running limit
// against every other claimer (see claim). A group the database still
// rolls back as a conflict (a deadlock over task rows, say) tells every
// member ErrNotApplied of ClassConflict, which writeRetrying runs again.
type pgBackend struct{}

func (pgBackend) dialect() string  { return string(StorePostgres) }
func (pgBackend) positional() bool { return true }
func (pgBackend) groups() bool     { return true }

// pgGroupLanes is how many group commits of one process run at once on
// PostgreSQL. One: since a group's CompleteAndClaim claims are one store
// claim (batch.go: mergeClaims), a group of ten slots' writes costs about
// as many round trips as a group of one, so one lane makes the largest
// groups and the fewest commits (docs/PERF.md has the lanes measured).
const pgGroupLanes = 1

func (pgBackend) groupLanes() int { return pgGroupLanes }

// handles reports whether path is a postgres:// or postgresql:// URL.
func (pgBackend) handles(path string) bool {
	scheme, _, ok := strings.Cut(path, "://")
	return ok && (strings.EqualFold(scheme, "postgres") || strings.EqualFold(scheme, "postgresql"))
}

func (pgBackend) sqlFiles() fs.FS {
	sub, err := fs.Sub(postgresFiles, "sql/postgres")
	if err != nil {
		panic("queue: embedded sql/postgres: " + err.Error()) // fs.Sub fails only on an invalid name
	}
	return sub
}

// PostgresMigrations returns the PostgreSQL migrations this build carries,
// in order; each call returns its own copy of the list.
func PostgresMigrations() ([]Migration, error) {
	set, err := sqlOf(pgBackend{})
	if err != nil {
		return nil, err
	}
	return slices.Clone(set.migrations), nil
}

// pgConnsDefault is the pool size when Options.MaxConns is not set.
const pgConnsDefault = 8

// connect opens a pool on the URL in o.Path, every connection with the
// store's session settings (pgsession.go). The settings it reports are
// for evidence and hold no password. Options.Driver, when set, must open
// pgx connections through stdlib's default driver (a fault injector
// wrapping stdlib.GetDefaultDriver()): it is given the name of the whole
// configuration registered with stdlib, so that its connections carry
// the same settings and dialer.
func (pgBackend) connect(ctx context.Context, o Options) (*sql.DB, []string, error) {
	loc, err := ParseLocation(o.Path)
	if err != nil {
		return nil, nil, &model.ValidationError{Field: "db", Problem: strings.TrimSuffix(err.Error(), ": "+ErrBadLocation.Error())}
	}
	if o.Image != nil {
		return nil, nil, &model.ValidationError{Field: "db", Problem: "a database image is SQLite's"}
	}
	cfg, err := pgx.ParseConfig(loc.URL)
	if err != nil {
		return nil, nil, &model.ValidationError{Field: "db", Problem: redact.Passwords("the URL "+loc.String()+" is not valid", loc.URL)}
	}
	session, err := pgSessionOf(cfg.RuntimeParams, o.IdleInTransactionTimeout)
	if err != nil {
		return nil, nil, err
	}
	session.apply(cfg)
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
		return nil, nil, fmt.Errorf("queue: connect to %s: %w", loc.String(), scrubbed(err, loc.URL))
	}
	settings := append([]string{"server=" + loc.String(), "isolation=read committed", fmt.Sprintf("max_conns=%d", conns)},
		session.settings()...)
	if lt := cfg.RuntimeParams["lock_timeout"]; lt != "" {
		settings = append(settings, "lock_timeout="+lt)
	}
	if o.ReadOnly {
		settings = append(settings, "default_transaction_read_only=on")
	}
	return db, settings, nil
}

// pgLockTimeout is the lock_timeout that Options.BusyTimeout asks of
// PostgreSQL: how long a statement waits for a lock another transaction
// holds before failing with lock_not_available (ClassBusy). Zero leaves
// the server's setting (by default, waiting as long as it takes);
// NoBusyTimeout fails at once (a millisecond: zero would mean no limit).
func pgLockTimeout(busy time.Duration) (string, bool) {
	switch {
	case busy == NoBusyTimeout:
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
func (pgBackend) classify(err error) StorageClass {
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
		return ClassConnection
	}
	return ""
}

// sqlStater is an error that carries a SQLSTATE: pgx's *pgconn.PgError (a
// server's error), and the errors fault injectors make up in its place.
type sqlStater interface{ SQLState() string }

// classOfSQLState is the storage class of a SQLSTATE, or "" for an error
// that is no storage failure (a syntax error is a bug, and is reported as
// itself).
func classOfSQLState(code string) StorageClass {
	switch code {
	case "40001", "40P01": // serialization_failure, deadlock_detected
		return ClassConflict
	case "23505": // unique_violation: a key raced by another connection
		return ClassConstraint
	case "53100": // disk_full
		return ClassDiskFull
	case "53200": // out_of_memory
		return ClassNoMemory
	case "53300", "55P03", "57014": // too_many_connections, lock_not_available, query_canceled
		return ClassBusy
	case "58030": // io_error
		return ClassIO
	case "25006": // read_only_sql_transaction
		return ClassReadOnly
	case "XX001", "XX002": // data_corrupted, index_corrupted
		return ClassCorrupt
	case "3D000", "28000", "28P01", "42501": // no such database, auth, privilege
		return ClassCantOpen
	}
	switch {
	case strings.HasPrefix(code, "08"), code == "57P01", code == "57P02", code == "57P03", code == "25P03":
		// connection exceptions, server shutting down or starting, and a
		// session the server ended for idling inside a transaction
		// (idle_in_transaction_session_timeout: its client went quiet)
		return ClassConnection
	case strings.HasPrefix(code, "53"):
		return ClassNoMemory // insufficient resources
	}
	return ""
}

// claim takes up to max tasks in claim order, in one statement
// (claim_batch: functions.sql's claim, which says how it holds the
// per-user running limit without waiting on another claimer), and calls
// took with each, as it was, in claim order.
func (pgBackend) claim(t *txn, req model.ClaimRequest, max int, took func(model.Task) error) error {
	now := model.Millis(t.now)
	rows, err := t.query(qClaimBatch, sql.Named("now", now), sql.Named("max", max), sql.Named("owner", req.Worker),
		sql.Named("lease_until", model.Millis(t.now.Add(req.Lease))))
	if err != nil {
		return fmt.Errorf("queue: claim: %w", err)
	}
	taken, err := scanTasks(rows)
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

// completeAndClaim runs a fused group (fused.go) as complete_and_claim, one
// statement and its own transaction (functions.sql). A server's error
// (a *pgconn.PgError, or an injected one with a SQLSTATE) rolled the
// statement's transaction back, unless it is a connection failure or a
// shutdown (SQLSTATE class 08, 57P01-57P03), after which the statement
// may have committed; an error without a SQLSTATE (a lost or refused
// connection) leaves it unknown too, unless pgx says nothing was sent.
func (pgBackend) completeAndClaim(q *Queue, f fusedGroup) ([]model.Task, bool, error) {
	claims, err := json.Marshal(f.claims)
	if err != nil {
		return nil, false, fmt.Errorf("complete and claim: %w", err)
	}
	events, err := json.Marshal(f.events)
	if err != nil {
		return nil, false, fmt.Errorf("complete and claim: %w", err)
	}
	now := model.Millis(f.now)
	// The statement is the group's: no one caller's cancellation may end
	// it (the outcome of a cancelled statement would be unknown).
	rows, err := q.readRows(context.Background(), qCompleteAndClaim, sql.Named("claims", string(claims)),
		sql.Named("events", string(events)), sql.Named("now", now), sql.Named("max", f.max),
		sql.Named("owner", f.claim.Worker), sql.Named("lease_until", model.Millis(f.now.Add(f.claim.Lease))),
		sql.Named("scope", f.scope))
	if err == nil {
		var taken []model.Task
		// The statement has committed once its rows are read to the end
		// and closed without error: a failed commit is reported there.
		taken, err = scanTasks(rows)
		if cerr := rows.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("queue: complete_and_claim: %w", cerr)
		}
		if err == nil {
			return taken, false, nil
		}
	}
	var st sqlStater
	if errors.As(err, &st) && st.SQLState() == pgStateFusedMismatch {
		return nil, false, errFusedMismatch
	}
	return nil, pgMayHaveCommitted(err), err
}

// submitOne runs a lone submit (submitone.go) as submit_one, one statement
// and its own transaction (functions.sql). Its failures are read as
// completeAndClaim's: a server's error rolled it back, a lost connection
// may have left it committed. The task's ID is drawn first, as the
// statement may insert it; one it did not insert is given back
// (Queue.unusedID).
func (b pgBackend) submitOne(q *Queue, s *submission, now time.Time) (submitOutcome, bool, error) {
	id, err := q.newID(model.TaskIDPrefix, model.TaskKey(s.n.User, s.n.Key))
	if err != nil {
		return submitOutcome{}, false, err
	}
	out, unknown, err := b.submitOneAs(q, s, id, now)
	if unknown || (err == nil && out.kind == "inserted") {
		return out, unknown, err
	}
	q.unusedID(model.TaskIDPrefix, id)
	return out, unknown, err
}

// submitOneAs runs submit_one for s with the task ID id.
func (pgBackend) submitOneAs(q *Queue, s *submission, id string, now time.Time) (submitOutcome, bool, error) {
	n := s.n
	// The statement is the submit's alone, and its outcome must be read
	// whole: the caller's cancellation may not end it.
	rows, err := q.readRowsBare(context.Background(), qSubmitOne, sql.Named("id", id), sql.Named("user", n.User),
		sql.Named("key", n.Key), sql.Named("hash", n.Hash), sql.Named("payload", n.Payload),
		sql.Named("priority", n.Priority), sql.Named("run_at", model.Millis(s.runAt(now))),
		sql.Named("deadline", model.Millis(n.Deadline)), sql.Named("now", model.Millis(now)),
		sql.Named("cost_budget", n.CostBudget), sql.Named("steps_max", n.StepsMax),
		sql.Named("schedule_id", n.ScheduleID), sql.Named("schedule_run", n.ScheduleRun),
		sql.Named("actor", s.actor), sql.Named("scope", s.scope), sql.Named("timely", n.CheckTimely(now) == nil))
	if err == nil {
		var out submitOutcome
		var taskID sql.NullString
		switch {
		case !rows.Next():
			err = rows.Err()
			if err == nil {
				err = errors.New("submit_one returned no row")
			}
		default:
			err = rows.Scan(&out.kind, &taskID, &out.n, &out.limit)
		}
		// The statement has committed once its rows are closed without
		// error: a failed commit is reported there.
		if cerr := rows.Close(); err == nil && cerr != nil {
			err = cerr
		}
		if err == nil {
			out.taskID = taskID.String
			return out, false, nil
		}
		err = fmt.Errorf("submit_one: %w", err)
	}
	return submitOutcome{}, pgMayHaveCommitted(err), err
}

// pgStateFusedMismatch is the SQLSTATE complete_and_claim fails with when
// a claim did not match (functions.sql).
const pgStateFusedMismatch = "LH001"

// pgMayHaveCommitted reports whether a statement run as its own
// transaction that failed with err may have committed (see
// completeAndClaim).
func pgMayHaveCommitted(err error) bool {
	var st sqlStater
	if errors.As(err, &st) && st.SQLState() != "" {
		code := st.SQLState()
		return strings.HasPrefix(code, "08") || code == "57P01" || code == "57P02" || code == "57P03"
	}
	return !pgconn.SafeToRetry(err)
}

// pgFolded is the history of the PostgreSQL store's pre-release
// migrations 0001-0021, which the baseline (0001_baseline.sql) replaced:
// each file's name and SHA-256 as schema_migrations records them.
var pgFolded = foldedHistory{
	migrations: []AppliedMigration{
		{1, "0001_init.sql", "2d91203602c3ac18a3b1f5539564051eeae3473910869a7830f086ba8ec052cf"},
		{2, "0002_prune.sql", "66cdbd08678cf70e9980764d0e4c6f5785bc3b0aefdbfcfa7ada89085b0df784"},
		{3, "0003_user_deltas.sql", "61b73a8c10e723110e942cd00c2af532fc221ee327901b6c7ee0fbf8b3debab8"},
		{4, "0004_statement_counters.sql", "44d08a39e0118fd0f22a63a29c9e97107ceeb5e5907208cb5a580b496e7ade17"},
		{5, "0005_claim_function.sql", "433626bf1a15ce0fa0c417a0abd77bd2626007e0fa96bdb11b90518d3c054185"},
		{6, "0006_lean_hot_path.sql", "bfcfb780e294140e9e50921ea7243af50b68ec30fb0b0b3b35734a32d1104f87"},
		{7, "0007_claim_without_bitmaps.sql", "a5c44a1ecf6442816bc5abdbe9824402b16a2dbe6e31f9cd1193c807fe6ebeca"},
		{8, "0008_fused_group_counts_itself.sql", "0cc9eca48c757a560249a6a02fc5a99eb21b0efc799765e7e41bc4921288117a"},
		{9, "0009_claim_lets_submits_pass.sql", "267645c1144105b79dbbef8de8181018780a67304f6737b0ba713a4908059273"},
		{10, "0010_fused_claim_inline.sql", "da145f19d54134313ea23d7e25dc7969c4018eae7a53743009dcd60f37f547c0"},
		{11, "0011_submit_in_one_statement.sql", "fca3ec9f83430a8e80f078c9fb4887e29b3071d482131bd6f96581e698233560"},
		{12, "0012_claim_by_one_scan.sql", "5020454198394458b49ef633459394cea0480c19984978ff79c94234e315bc78"},
		{13, "0013_task_keys.sql", "10613a044899c9cdce2e81c5417f5c27b60ff61e2eb7cee545713ace320d9dc1"},
		{14, "0014_fused_group_fewer_statements.sql", "e33f743714df063e50eb8ebad1f31af99fe3d463c5800218fe129f2af99eccd6"},
		{15, "0015_lone_submit_counts_itself.sql", "2e56528d6ba26b27a1a88d181a8dbdecdd88dd3171af3ee53c9531b999fe39b6"},
		{16, "0016_submit_folds_user_deltas.sql", "0f49ae3ded3d722794cb40014f4bec9a68c2ead8fd9ec9856070dd7e19147aa6"},
		{17, "0017_claim_reads_its_users.sql", "f451a9118f4beab72978974d7def6227308a799f070b255014537e1155ed5539"},
		{18, "0018_submit_counts_by_state.sql", "826dea232147e5304479894bf29e0db3b831d879bc3ed8c8133df2e12feaea62"},
		{19, "0019_column_rules_as_domains.sql", "724905e31b17295d6bc8787609af284e07988f419b44ff25b9c3805a9256b3ff"},
		{20, "0020_active_count_by_index.sql", "132a8ea2f426c96f0845f59c4d9715353a009006df7f575da0253df772512bde"},
		{21, "0021_completion_clears_last_error.sql", "ebd26403b4a920b14d780534ce8ed3694af7d0c7a0e91051a467a5b5b6b48d40"},
	},
	// 0021 changed a function only: a database at 20 holds the baseline's
	// schema too.
	schemaFrom: 20,
	// The functions whose broken-variant parameters functions.sql dropped.
	dropped: []string{
		"DROP FUNCTION IF EXISTS claim_batch(BIGINT, BIGINT, BIGINT, INTEGER, TEXT, BIGINT, BOOLEAN)",
		"DROP FUNCTION IF EXISTS complete_and_claim(JSONB, JSONB, BIGINT, BIGINT, BIGINT, INTEGER, TEXT, BIGINT, BOOLEAN, BOOLEAN, TEXT)",
		"DROP FUNCTION IF EXISTS submit_one(TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, BIGINT, BIGINT, BIGINT, BIGINT, BIGINT, TEXT, BIGINT, TEXT, TEXT, BOOLEAN, BOOLEAN, BIGINT)",
	},
	build: "3be390c",
}

func (pgBackend) folded() *foldedHistory { return &pgFolded }

// capabilities: fused groups and lone submits in one statement each,
// LISTEN/NOTIFY wake-ups, counters as rows of changes, and transactions
// that commit out of event order.
func (b pgBackend) capabilities() capabilities {
	return capabilities{fuse: b, submitAlone: b, notifyReady: b, counterRows: true, commitsOutOfOrder: true,
		sessionTimeouts: true, runningOverActive: true}
}

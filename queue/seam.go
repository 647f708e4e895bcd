package queue

import (
	"context"
	"database/sql"
	"io/fs"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold/model"
)

// The storage seam. The protocol (intake, fencing, settle, charging
// attempts, admission, the effects ledger, events, group commit) is written
// once, in this package, over a backend: what one database supplies. A
// backend is a value of a type in a file of its own (sqlite.go; the
// PostgreSQL store's pg*.go), with its SQL in sql/<dialect>/:
//
//   - queries.sql: every named query the protocol runs ("-- name: NAME"
//     sections; see parseQueries), with named parameters (:name), which
//     the loader rewrites to $1, $2, ... for a backend whose driver takes
//     only positional ones (see rewriteParams);
//   - migrations/NNNN_name.sql: its schema, numbered from 0001 without
//     gaps, each file pinned by its checksum once committed.
//
// Transactions. Every write operation runs in a transaction begun with
// database/sql's BeginTx(ctx, nil); the backend decides in its connections
// what that BEGIN means: SQLite's DSN makes it BEGIN IMMEDIATE (the write
// lock is taken at once, so no operation fails half-way on a lock
// upgrade); PostgreSQL's plain BEGIN at READ COMMITTED is enough, because
// every fenced write is a conditional UPDATE that PostgreSQL re-checks on
// the row's newest version under its row lock. Savepoints are the queries
// group_savepoint and group_rollback of each dialect (both databases speak
// SAVEPOINT and ROLLBACK TO SAVEPOINT); only a backend whose groups()
// is true ever runs them, and only in a group of more than one operation.
type backend interface {
	// dialect names the backend and the folder of its SQL files,
	// sql/<dialect>; it is also what errors and evidence call the store.
	dialect() string
	// sqlFiles holds queries.sql and migrations/ at its root.
	sqlFiles() fs.FS
	// folded is the history of migrations the store's baseline replaced
	// (fold.go), or nil.
	folded() *foldedHistory
	// capabilities states what the store does beyond the statements every
	// store has: the protocol asks here, never by the store's type, its
	// dialect's name or whether its files define a query.
	capabilities() capabilities
	// positional reports whether the driver takes only $n parameters, so
	// that queries are rewritten and their named arguments bound in order.
	positional() bool
	// handles reports whether a --db value (Options.Path) names one of
	// this backend's databases. SQLite, the default, is asked last.
	handles(path string) bool
	// connect opens the connection pool for o (its pool rules, DSN and
	// settings) and returns it with the settings applied, for evidence
	// (SQLite's PRAGMAs). It checks no schema.
	connect(ctx context.Context, o Options) (*sql.DB, []string, error)
	// classify returns err's storage class, or "" when err is no storage
	// failure of this backend's driver.
	classify(err error) StorageClass
	// groups reports whether concurrent writes of one process may share
	// one transaction (group commit, group.go).
	groups() bool
	// groupLanes is how many groups of one process may run at once, each
	// its own transaction: 1 where the database has one writer.
	groupLanes() int
	// claim takes, inside t, up to max claimable tasks for req in claim
	// order (priority, then run_at, then submission; due, within their
	// deadline, their user below its running limit), and calls took with
	// each, as the row was before it was taken, before it takes another
	// (or, for a strategy that takes a batch in one statement, after that
	// statement); an error from took ends the claim with it. Taking a task
	// does what sqlite's claim_task does: state running, version + 1,
	// owner, lease_until = now + req.Lease, claimed_at, heartbeat_at and
	// updated_at = now. The protocol (Claim) applies the same change to
	// the snapshot it returns and records the event.
	claim(t *txn, req model.ClaimRequest, max int, took func(model.Task) error) error
}

// capabilities are what a store does beyond the statements every store
// has. A nil interface is an ability the store lacks.
type capabilities struct {
	// fuse runs a fused group in one statement (fused.go).
	fuse fuser
	// submitAlone runs a lone submit in one statement (submitone.go).
	submitAlone submitFuser
	// notifyReady tells other processes' idle workers that a task became
	// claimable (pgnotify.go); without it only this process's are woken.
	notifyReady readyNotifier
	// localFile: the database is a file on this machine, which snapshots,
	// restores and Inspect read directly, and whose path holds no secret.
	localFile bool
	// blockedFlags: queued tasks carry blocked flags that a limit change
	// re-evaluates (reblock_all, reblock_user).
	blockedFlags bool
	// counterRows: the counters are rows of changes that housekeeping
	// folds (tally_compact, tally_rows).
	counterRows bool
	// commitsOutOfOrder: transactions commit in any order relative to the
	// event numbers they drew, so a read of the trail from a cursor first
	// waits for the writers (events_after_lock: settled.go), and migrating
	// takes a lock of its own first (migrations_lock).
	commitsOutOfOrder bool
	// walTruncate: after a full disk the store truncates its write-ahead
	// log (wal_truncate) until the disk has room.
	walTruncate bool
	// sessionTimeouts: the store's connections carry the session timeouts
	// its URL and Options set (pgsession.go), which bound a lease.
	sessionTimeouts bool
	// runningOverActive names the third count of counters_check: a count
	// of users whose running count passes their active count (PostgreSQL),
	// or else of queued tasks whose blocked or limited flags are wrong.
	runningOverActive bool
}

// backends are the stores this build carries, the default (SQLite) first.
// Another store's file adds itself in an init function (registerBackend).
var backends = []backend{sqliteBackend{}}

// registerBackend adds a store; it is called from init functions only.
func registerBackend(b backend) { backends = append(backends, b) }

// backendFor returns the store that handles path: the first registered
// after SQLite that claims it, else SQLite.
func backendFor(path string) backend {
	for _, b := range backends[1:] {
		if b.handles(path) {
			return b
		}
	}
	return backends[0]
}

// rewriteParams rewrites the named parameters (:name) of query to $1, $2,
// ... in order of first use, a name used twice getting one number, and
// returns the names by number. Text inside single-quoted strings, double-
// quoted identifiers and -- comments is left alone, and so is a cast
// (value::type).
func rewriteParams(query string) (string, []string) {
	var out strings.Builder
	var names []string
	number := map[string]int{}
	for i := 0; i < len(query); {
		c := query[i]
		switch {
		case c == '\'' || c == '"':
			end := quotedEnd(query, i)
			out.WriteString(query[i:end])
			i = end
		case c == '-' && strings.HasPrefix(query[i:], "--"):
			end := strings.IndexByte(query[i:], '\n')
			if end < 0 {
				end = len(query) - i
			}
			out.WriteString(query[i : i+end])
			i += end
		case c == ':' && strings.HasPrefix(query[i:], "::"):
			out.WriteString("::")
			i += 2
		case c == ':' && i+1 < len(query) && isNameStart(query[i+1]):
			end := i + 1
			for end < len(query) && isNamePart(query[end]) {
				end++
			}
			name := query[i+1 : end]
			n, ok := number[name]
			if !ok {
				names = append(names, name)
				n = len(names)
				number[name] = n
			}
			out.WriteByte('$')
			out.WriteString(strconv.Itoa(n))
			i = end
		default:
			out.WriteByte(c)
			i++
		}
	}
	return out.String(), names
}

// quotedEnd returns the index just past the quoted text that starts at
// start (a doubled quote is part of the text); an unclosed quote runs to
// the end.
func quotedEnd(query string, start int) int {
	quote := query[start]
	for i := start + 1; i < len(query); i++ {
		if query[i] != quote {
			continue
		}
		if i+1 < len(query) && query[i+1] == quote {
			i++
			continue
		}
		return i + 1
	}
	return len(query)
}

func isNameStart(c byte) bool { return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isNamePart(c byte) bool  { return isNameStart(c) || '0' <= c && c <= '9' }

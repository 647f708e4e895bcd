package queue

import (
	"strconv"
	"strings"

	"github.com/leasehold/leasehold/queue/internal/postgres"
	"github.com/leasehold/leasehold/queue/internal/seam"
	"github.com/leasehold/leasehold/queue/internal/sqlite"
)

// The storage seam. The protocol (intake, fencing, settle, charging
// attempts, admission, the effects ledger, events, group commit) is written
// once, in this package, over a seam.Store: what one database supplies
// (queue/internal/seam says what). Each store is a package of its own,
// queue/internal/<dialect>, with its SQL in that package's sql/:
//
//   - queries.sql: every named query the protocol runs ("-- name: NAME"
//     sections; see parseQueries), with named parameters (:name), which
//     the loader rewrites to $1, $2, ... for a store whose driver takes
//     only positional ones (see rewriteParams);
//   - migrations/NNNN_name.sql: its schema, numbered from 0001 without
//     gaps, each file pinned by its checksum once committed.
//
// Transactions. Every write operation runs in a transaction begun with
// database/sql's BeginTx(ctx, nil); the store decides in its connections
// what that BEGIN means: SQLite's DSN makes it BEGIN IMMEDIATE (the write
// lock is taken at once, so no operation fails half-way on a lock
// upgrade); PostgreSQL's plain BEGIN at READ COMMITTED is enough, because
// every fenced write is a conditional UPDATE that PostgreSQL re-checks on
// the row's newest version under its row lock. Savepoints are the queries
// group_savepoint and group_rollback of each dialect (both databases speak
// SAVEPOINT and ROLLBACK TO SAVEPOINT); only a store whose Groups
// capability is set ever runs them, and only in a group of more than one
// operation.
type backend = seam.Store

// capabilities are what a store does beyond the statements every store
// has (seam.Capabilities).
type capabilities = seam.Capabilities

// backends are the stores this build carries, the default (SQLite) first.
var backends = []backend{sqlite.Store{}, postgres.Store{}}

// backendFor returns the store that handles path: the first after SQLite
// that claims it, else SQLite.
func backendFor(path string) backend {
	for _, b := range backends[1:] {
		if b.Handles(path) {
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

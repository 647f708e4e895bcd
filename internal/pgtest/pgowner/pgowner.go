// Package pgowner lets a run that makes PostgreSQL schemas of its own
// (the simulator's PostgreSQL store, the peers bench) own them, and drop
// the schemas of runs that died without dropping theirs. It sits beside
// pgtest, which gives each test a schema, and imports no testing code, so
// the binary's simulator can use it.
package pgowner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// A run that makes PostgreSQL schemas of its own (the simulator's store,
// the peers bench) owns them through a session-level advisory lock on
// their name prefix, held by a connection of its own from before it makes
// its first schema until it has dropped them. A run that is killed loses
// the connection, and the server releases the lock with it; a later run
// that finds schemas of a prefix whose lock it can take knows no run on
// any machine uses them, and drops them. A prefix whose lock is held
// belongs to a live run, whatever its process ID says: pids are a
// machine's, the lock is the server's.

// OwnerKind says whose schemas an Owner holds.
type OwnerKind struct {
	// LockClass is the first key of the owner lock; the second is
	// hashtext of the prefix. Two prefixes that hash alike only make a
	// run keep what it might have dropped, or take another prefix.
	LockClass int64
	// Start begins every owned prefix. Schemas named otherwise (of builds
	// that held no lock) are never taken for a dead run's.
	Start string
	// Schema matches the name of an owned schema, its first group the
	// prefix.
	Schema *regexp.Regexp
	// Retries is how many other prefixes (base without its last _, then
	// rN_) a run tries when a live run holds its base's lock; 0 fails at
	// once.
	Retries int
	// Who names the runs in errors ("sim", "bench").
	Who string
}

// ident quotes a name.
func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// orphansMax bounds the prefixes of dead runs one run drops; the rest
// wait for a later run.
const orphansMax = 1000

// ErrPrefixTaken is returned when every prefix a run tries is held by a
// live run.
var ErrPrefixTaken = errors.New("every schema prefix tried is held by a live run")

// Owner is a run's hold on its schema prefix.
type Owner struct {
	conn   *pgx.Conn
	Prefix string
}

// Own connects to serverURL, takes the owner lock of base (or of a retry
// of it) and drops the schemas of dead runs of kind. Close releases the
// lock. Errors may name the URL's host, never its password.
func Own(ctx context.Context, serverURL string, kind OwnerKind, base string) (*Owner, error) {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return nil, fmt.Errorf("%s: connect to the postgres server: %w", kind.Who, err)
	}
	prefix, err := kind.lockPrefix(ctx, conn, base)
	if err == nil {
		err = kind.dropOrphans(ctx, conn, prefix)
	}
	if err != nil {
		return nil, errors.Join(err, conn.Close(ctx))
	}
	return &Owner{conn: conn, Prefix: prefix}, nil
}

// Close releases the owner lock (the run drops its own schemas first).
func (o *Owner) Close(ctx context.Context) error { return o.conn.Close(ctx) }

// lockPrefix takes, on conn, the owner lock of base or of the first of
// its retries whose lock is free, and returns that prefix.
func (k OwnerKind) lockPrefix(ctx context.Context, conn *pgx.Conn, base string) (string, error) {
	for try := range k.Retries + 1 {
		prefix := base
		if try > 0 {
			prefix = fmt.Sprintf("%sr%d_", strings.TrimSuffix(base, "_"), try)
		}
		got, err := k.tryLock(ctx, conn, prefix)
		if err != nil {
			return "", err
		}
		if got {
			return prefix, nil
		}
	}
	return "", fmt.Errorf("%s: %w (%d tried from %s; the same process ID on another machine?)", k.Who, ErrPrefixTaken, k.Retries+1, base)
}

// tryLock takes prefix's owner lock on conn if it is free.
func (k OwnerKind) tryLock(ctx context.Context, conn *pgx.Conn, prefix string) (bool, error) {
	var got bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1, hashtext($2))", k.LockClass, prefix).Scan(&got); err != nil {
		return false, fmt.Errorf("%s: take the owner lock of %s: %w", k.Who, prefix, err)
	}
	return got, nil
}

// dropOrphans drops, on conn (which holds own's owner lock), the schemas
// of every other owner of kind k whose lock it can take: that run is
// over. Each such lock is held while its schemas are dropped, so no run
// takes the prefix meanwhile, and released after.
func (k OwnerKind) dropOrphans(ctx context.Context, conn *pgx.Conn, own string) error {
	orphans, err := k.ownedSchemas(ctx, conn, own)
	if err != nil {
		return err
	}
	for _, prefix := range slices.Sorted(maps.Keys(orphans)) {
		got, err := k.tryLock(ctx, conn, prefix)
		if err != nil {
			return err
		}
		if !got {
			continue // a live run's
		}
		var drop strings.Builder
		for _, name := range orphans[prefix] {
			drop.WriteString("DROP SCHEMA IF EXISTS " + ident(name) + " CASCADE;\n")
		}
		_, err = conn.Exec(ctx, drop.String())
		if _, uerr := conn.Exec(ctx, "SELECT pg_advisory_unlock($1, hashtext($2))", k.LockClass, prefix); uerr != nil {
			err = errors.Join(err, fmt.Errorf("release the owner lock of %s: %w", prefix, uerr))
		}
		if err != nil {
			return fmt.Errorf("%s: drop the schemas of the dead run %s: %w", k.Who, prefix, err)
		}
	}
	return nil
}

// ownedSchemas returns the schemas of owners of kind k other than own, by
// prefix, at most orphansMax prefixes.
func (k OwnerKind) ownedSchemas(ctx context.Context, conn *pgx.Conn, own string) (map[string][]string, error) {
	rows, err := conn.Query(ctx, `SELECT nspname::TEXT FROM pg_namespace WHERE starts_with(nspname, $1) ORDER BY nspname COLLATE "C"`, k.Start)
	if err != nil {
		return nil, fmt.Errorf("%s: list the schemas: %w", k.Who, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("%s: list the schemas: %w", k.Who, err)
	}
	byPrefix := map[string][]string{}
	for _, name := range names {
		m := k.Schema.FindStringSubmatch(name)
		if m == nil || m[1] == own {
			continue
		}
		if _, seen := byPrefix[m[1]]; !seen && len(byPrefix) == orphansMax {
			break
		}
		byPrefix[m[1]] = append(byPrefix[m[1]], name)
	}
	return byPrefix, nil
}

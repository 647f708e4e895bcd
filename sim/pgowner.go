package sim

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

// A PostgreSQL store owns its schemas through a session-level advisory
// lock on its prefix, held by a connection of its own (pgStore.owner) from
// before it makes its first schema until Close has dropped them. A run
// that is killed loses the connection, and the server releases the lock
// with it; a later run that finds the simulator's schemas of a prefix
// whose lock it can take knows no run on any machine uses them, and drops
// them. A prefix whose lock is held belongs to a live run, whatever its
// process ID says: pids are a machine's, the lock is the server's.

// ownerLockClass is the first key of a store's owner lock; the second is
// hashtext of the store's prefix. Two prefixes that hash alike only make
// a run keep what it might have dropped, or pick another prefix.
const ownerLockClass = 7424610

// ownedPrefix is what starts the prefix of a store that holds an owner
// lock (schemaPrefix, "o", the process ID): the schemas of builds that
// held no lock are never taken for a dead run's, since nothing shows
// whether their run is alive.
const ownedPrefix = schemaPrefix + "o"

// ownedSchema matches the name of a schema of an owning store: its
// prefix (ownedPrefix, pid, the store's number, a retry's "r" and number)
// and what the schema is.
var ownedSchema = regexp.MustCompile(`^(` + ownedPrefix + `[0-9]+_[0-9]+(?:r[0-9]+)?_)(?:w[0-9]+|pristine)$`)

// prefixTriesMax bounds the prefixes a store tries before it gives up: it
// takes another only when a live store holds the lock of the one it tried
// (the same pid and number on another machine, or a hash alike).
const prefixTriesMax = 16

// orphansMax bounds the prefixes of dead runs one run drops.
const orphansMax = 1000

// ErrPrefixTaken is returned when a store finds the owner lock of every
// prefix it tries held by live stores.
var ErrPrefixTaken = errors.New("sim: every schema prefix tried is held by a live run")

// own connects the store's owner connection, takes the owner lock of a
// prefix no live store holds, and drops the schemas of dead runs. It runs
// once, before the store makes its first schema; until it succeeds the
// store makes none.
func (p *pgStore) own(ctx context.Context) error {
	p.ownMu.Lock()
	defer p.ownMu.Unlock()
	p.mu.Lock()
	owned, base := p.owner != nil, p.prefix
	p.mu.Unlock()
	if owned {
		return nil
	}
	conn, err := pgx.Connect(ctx, p.url)
	if err != nil {
		return fmt.Errorf("sim: connect to the postgres store: %w", scrub(err, p.url))
	}
	prefix, err := lockPrefix(ctx, conn, base)
	if err == nil {
		err = dropOrphans(ctx, conn, prefix)
	}
	if err != nil {
		return errors.Join(scrub(err, p.url), conn.Close(ctx))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.Join(errors.New("sim: the postgres store is closed"), conn.Close(ctx))
	}
	p.prefix, p.owner = prefix, conn
	return nil
}

// lockPrefix takes, on conn, the owner lock of base or of the first of
// its retries ("<base without _>r1_", ...) whose lock is free, and returns
// that prefix.
func lockPrefix(ctx context.Context, conn *pgx.Conn, base string) (string, error) {
	for try := range prefixTriesMax {
		prefix := base
		if try > 0 {
			prefix = fmt.Sprintf("%sr%d_", strings.TrimSuffix(base, "_"), try)
		}
		got, err := tryOwnerLock(ctx, conn, prefix)
		if err != nil {
			return "", err
		}
		if got {
			return prefix, nil
		}
	}
	return "", fmt.Errorf("%w (%d tried from %s)", ErrPrefixTaken, prefixTriesMax, base)
}

// tryOwnerLock takes prefix's owner lock on conn if it is free.
func tryOwnerLock(ctx context.Context, conn *pgx.Conn, prefix string) (bool, error) {
	var got bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1, hashtext($2))", ownerLockClass, prefix).Scan(&got); err != nil {
		return false, fmt.Errorf("sim: take the owner lock of %s: %w", prefix, err)
	}
	return got, nil
}

// dropOrphans drops, on conn (which holds own's owner lock), the schemas
// of every other owning store whose owner lock it can take: that store's
// run is over. Each such lock is held while its schemas are dropped, so
// no run takes the prefix meanwhile, and released after.
func dropOrphans(ctx context.Context, conn *pgx.Conn, own string) error {
	orphans, err := ownedSchemas(ctx, conn, own)
	if err != nil {
		return err
	}
	for _, prefix := range slices.Sorted(maps.Keys(orphans)) {
		got, err := tryOwnerLock(ctx, conn, prefix)
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
		if _, uerr := conn.Exec(ctx, "SELECT pg_advisory_unlock($1, hashtext($2))", ownerLockClass, prefix); uerr != nil {
			err = errors.Join(err, fmt.Errorf("sim: release the owner lock of %s: %w", prefix, uerr))
		}
		if err != nil {
			return fmt.Errorf("sim: drop the schemas of the dead run %s: %w", prefix, err)
		}
	}
	return nil
}

// ownedSchemas returns the schemas of owning stores other than own, by
// prefix, at most orphansMax prefixes.
func ownedSchemas(ctx context.Context, conn *pgx.Conn, own string) (map[string][]string, error) {
	rows, err := conn.Query(ctx, `SELECT nspname::TEXT FROM pg_namespace WHERE starts_with(nspname, $1) ORDER BY nspname COLLATE "C"`, ownedPrefix)
	if err != nil {
		return nil, fmt.Errorf("sim: list the simulator's schemas: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("sim: list the simulator's schemas: %w", err)
	}
	byPrefix := map[string][]string{}
	for _, name := range names {
		m := ownedSchema.FindStringSubmatch(name)
		if m == nil || m[1] == own {
			continue
		}
		if _, seen := byPrefix[m[1]]; !seen && len(byPrefix) == orphansMax {
			break // the rest wait for a later run
		}
		byPrefix[m[1]] = append(byPrefix[m[1]], name)
	}
	return byPrefix, nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"

	"github.com/jackc/pgx/v5"
	"github.com/leasehold/leasehold/queue"
)

// A bench owns its PostgreSQL schemas (pgSchemaPrefix, its process ID,
// "_run" and the run's number) through a session advisory lock on its
// prefix, held by a connection of its own for the whole bench. A bench
// that is killed loses the connection and the server releases the lock;
// the next bench on the server finds that prefix's schemas with no lock
// held and drops them. A prefix whose lock is held is a live bench's,
// whatever machine it runs on.

// pgOwnerClass is the first key of a bench's owner lock; the second is
// hashtext of its prefix.
const pgOwnerClass = 7424611

// pgSchemaPrefix starts every schema of a bench that holds an owner lock.
// Schemas named otherwise (an older bench's) are never dropped as orphans:
// nothing shows whether their bench is alive.
const pgSchemaPrefix = "peers_o"

// ownedSchema matches a schema of an owning bench and captures its prefix.
var ownedSchema = regexp.MustCompile(`^(` + pgSchemaPrefix + `[0-9]+_)run[0-9]+$`)

// pgOwner is a bench's hold on its schema prefix.
type pgOwner struct {
	conn   *pgx.Conn
	prefix string
}

// ownSchemas takes the owner lock of this process's prefix on a connection
// of its own and drops the schemas of benches whose lock is free (killed
// before they dropped their own). Close releases the lock.
func ownSchemas(ctx context.Context, base string) (*pgOwner, error) {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s", queue.RedactURL(err.Error()))
	}
	prefix := fmt.Sprintf("%s%d_", pgSchemaPrefix, os.Getpid())
	got, err := tryOwnerLock(ctx, conn, prefix)
	if err == nil && !got {
		err = fmt.Errorf("postgres: another bench holds the schemas of %s (the same process ID on another machine)", prefix)
	}
	if err == nil {
		err = dropOrphans(ctx, conn, prefix)
	}
	if err != nil {
		return nil, errors.Join(err, conn.Close(context.Background()))
	}
	return &pgOwner{conn: conn, prefix: prefix}, nil
}

// schema is the name of run's schema.
func (o *pgOwner) schema(run int) string { return fmt.Sprintf("%srun%d", o.prefix, run) }

// Close releases the owner lock (the schemas are dropped run by run).
func (o *pgOwner) Close() error { return o.conn.Close(context.Background()) }

// tryOwnerLock takes prefix's owner lock on conn if it is free.
func tryOwnerLock(ctx context.Context, conn *pgx.Conn, prefix string) (bool, error) {
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, hashtext($2))`, pgOwnerClass, prefix).Scan(&got); err != nil {
		return false, fmt.Errorf("postgres: take the owner lock of %s: %w", prefix, err)
	}
	return got, nil
}

// dropOrphans drops, on conn, the schemas of every other owning bench
// whose owner lock it can take, holding that lock while it drops them so
// that no bench takes the prefix meanwhile.
func dropOrphans(ctx context.Context, conn *pgx.Conn, own string) error {
	rows, err := conn.Query(ctx, `SELECT nspname FROM pg_namespace WHERE nspname LIKE 'peers\_o%' ORDER BY nspname COLLATE "C"`)
	if err != nil {
		return fmt.Errorf("postgres: list schemas: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("postgres: list schemas: %w", err)
	}
	byPrefix := map[string][]string{}
	var prefixes []string
	for _, n := range names {
		m := ownedSchema.FindStringSubmatch(n)
		if m == nil || m[1] == own {
			continue
		}
		if byPrefix[m[1]] == nil {
			prefixes = append(prefixes, m[1])
		}
		byPrefix[m[1]] = append(byPrefix[m[1]], n)
	}
	for _, p := range prefixes {
		got, err := tryOwnerLock(ctx, conn, p)
		if err != nil {
			return err
		}
		if !got {
			continue // a live bench's
		}
		for _, s := range byPrefix[p] {
			if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{s}.Sanitize()+` CASCADE`); err != nil {
				return fmt.Errorf("postgres: drop the orphaned schema %s: %w", s, err)
			}
		}
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1, hashtext($2))`, pgOwnerClass, p); err != nil {
			return fmt.Errorf("postgres: release the owner lock of %s: %w", p, err)
		}
	}
	return nil
}

package main

import (
	"context"
	"fmt"
	"os"
	"regexp"

	"github.com/leasehold/leasehold/internal/pgtest/pgowner"
	"github.com/leasehold/leasehold/queue"
)

// A bench owns its PostgreSQL schemas (pgSchemaPrefix, its process ID,
// "_run" and the run's number) through an owner lock on its prefix
// (internal/pgtest/pgowner), held for the whole bench; the next bench on
// the server drops the schemas of a bench that was killed.

// pgSchemaPrefix starts every schema of a bench that holds an owner lock.
// Schemas named otherwise (an older bench's) are never dropped as orphans:
// nothing shows whether their bench is alive.
const pgSchemaPrefix = "peers_o"

// benchSchemas are the benches' schemas: one prefix a process, no other
// tried when a live bench holds it.
var benchSchemas = pgowner.OwnerKind{LockClass: 7424611, Start: pgSchemaPrefix,
	Schema: regexp.MustCompile(`^(` + pgSchemaPrefix + `[0-9]+_)run[0-9]+$`), Who: "postgres"}

// pgOwner is a bench's hold on its schema prefix.
type pgOwner struct{ *pgowner.Owner }

// ownSchemas takes the owner lock of this process's prefix and drops the
// schemas of benches whose lock is free (killed before they dropped their
// own). Close releases the lock.
func ownSchemas(ctx context.Context, base string) (*pgOwner, error) {
	o, err := pgowner.Own(ctx, base, benchSchemas, fmt.Sprintf("%s%d_", pgSchemaPrefix, os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("%s", queue.RedactURL(err.Error()))
	}
	return &pgOwner{o}, nil
}

// schema is the name of run's schema.
func (o *pgOwner) schema(run int) string { return fmt.Sprintf("%srun%d", o.Prefix, run) }

// Close releases the owner lock (the schemas are dropped run by run).
func (o *pgOwner) Close() error { return o.Owner.Close(context.Background()) }

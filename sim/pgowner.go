package sim

import (
	"context"
	"errors"
	"regexp"

	"github.com/leasehold/leasehold/internal/pgtest/pgowner"
)

// A PostgreSQL store owns its schemas through an owner lock on its prefix
// (internal/pgtest/pgowner, pgStore.owner), from before it makes its first
// schema until Close has dropped them; a store that starts drops the
// schemas of dead runs.

// ownedPrefix is what starts the prefix of a store that holds an owner
// lock (schemaPrefix, "o", the process ID): the schemas of builds that
// held no lock are never taken for a dead run's, since nothing shows
// whether their run is alive.
const ownedPrefix = schemaPrefix + "o"

// ownedSchema matches the name of a schema of an owning store: its
// prefix (ownedPrefix, pid, the store's number, a retry's "r" and number)
// and what the schema is.
var ownedSchema = regexp.MustCompile(`^(` + ownedPrefix + `[0-9]+_[0-9]+(?:r[0-9]+)?_)(?:w[0-9]+|pristine)$`)

// simSchemas are the simulator's stores' schemas (internal/pgtest/pgowner): a store tries up to 15 other prefixes when a live store holds
// its own's lock (the same pid and number on another machine, or a hash
// alike).
var simSchemas = pgowner.OwnerKind{LockClass: 7424610, Start: ownedPrefix, Schema: ownedSchema, Retries: 15, Who: "sim"}

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
	release := p.conns.hold() // the owner's connection is one of the store's
	var owner *pgowner.Owner
	err := p.conns.dial(ctx, func() (err error) {
		owner, err = pgowner.Own(ctx, p.url, simSchemas, base)
		return err
	})
	if err != nil {
		release()
		return scrub(err, p.url)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		release()
		return errors.Join(errors.New("sim: the postgres store is closed"), owner.Close(ctx))
	}
	p.prefix, p.owner, p.ownerRelease = owner.Prefix, owner, release
	return nil
}

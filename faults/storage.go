package faults

import (
	"database/sql/driver"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/faults/storagefault"
)

// The storage injector is package storagefault's, which imports neither
// worker nor queue so that queue's own tests can use it; as os.FileMode is
// fs.FileMode, these names are its, so that the simulator and the live run
// find every injector here.

// Storage is the SQL driver that injects storage faults
// (storagefault.Storage).
type Storage = storagefault.Storage

// StorageFault is a one-shot storage fault (storagefault.Fault).
type StorageFault = storagefault.Fault

// StorageCounts counts the storage faults fired (storagefault.Counts).
type StorageCounts = storagefault.Counts

// The storage faults (see storagefault).
const (
	FailBegin       = storagefault.FailBegin
	FailStatement   = storagefault.FailStatement
	FailCommit      = storagefault.FailCommit
	AmbiguousCommit = storagefault.AmbiguousCommit
	Busy            = storagefault.Busy
)

// ErrDriverUnsupported is storagefault.ErrDriverUnsupported.
var ErrDriverUnsupported = storagefault.ErrDriverUnsupported

// NewStorage returns a Storage wrapping inner, its outage windows measured
// on clock (storagefault.NewStorage).
func NewStorage(inner driver.Driver, clock clockwork.Clock) *Storage {
	return storagefault.NewStorage(inner, clock)
}

// StorageFaults lists every storage fault (storagefault.Faults).
func StorageFaults() []StorageFault { return storagefault.Faults() }

// ParseStorageFault returns the storage fault named name
// (storagefault.ParseFault).
func ParseStorageFault(name string) (StorageFault, error) { return storagefault.ParseFault(name) }

// NewPostgresStorage returns a Storage wrapping inner, pgx's database/sql
// driver, whose faults read as a PostgreSQL server's
// (storagefault.NewPostgres).
func NewPostgresStorage(inner driver.Driver, clock clockwork.Clock) *Storage {
	return storagefault.NewPostgres(inner, clock)
}

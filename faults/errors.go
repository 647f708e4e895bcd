package faults

import (
	"errors"

	"github.com/leasehold/leasehold/faults/storagefault"
)

// ErrInjected is wrapped by every error an injector makes up, so a test or
// the simulator can tell an injected failure from a real one with
// errors.Is(err, ErrInjected). It is storagefault.ErrInjected: the storage
// injector's errors wrap it too.
var ErrInjected = storagefault.ErrInjected

// ErrProcessState is returned by a Process asked to do what its state does
// not allow (stall a crashed process, restart a running one). It reports a
// mistake in the driver of the simulation, not an injected fault.
var ErrProcessState = errors.New("faults: process cannot do that in its state")

// Error is an injected error (storagefault.Error): its message names the
// operation it hit and the fault, and it wraps ErrInjected and any
// sentinel the real failure would carry.
type Error = storagefault.Error

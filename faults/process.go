package faults

import (
	"fmt"
	"sync"
)

// ProcessState is what a simulated worker process is doing.
type ProcessState string

// The process states.
const (
	// ProcessRunning: the process is stepped.
	ProcessRunning ProcessState = "running"
	// ProcessStalled: the process is not stepped but keeps its memory and
	// its claims; on Resume it carries on with them, however stale.
	ProcessStalled ProcessState = "stalled"
	// ProcessCrashed: the process is gone with its memory; only what it
	// committed survives. Restart starts a new one.
	ProcessCrashed ProcessState = "crashed"
)

// String returns the state's name.
func (s ProcessState) String() string { return string(s) }

// Process is the crash and stall bookkeeping of one simulated worker
// process; the simulator owns the worker object and consults Process to
// decide what to do with it. It simulates a crash (Crash: memory lost, the
// simulator discards the worker and builds a new one on Restart) and a
// stall past the lease (Stall: no steps until Resume, after which the old
// worker carries on with its old claims). It injects no errors into the
// system; a transition its state does not allow is refused with an error
// wrapping ErrProcessState. Process is safe for concurrent use.
type Process struct {
	name string

	mu         sync.Mutex
	state      ProcessState
	generation int
	crashes    int
	stalls     int
}

// NewProcess returns a running process of generation 0.
func NewProcess(name string) *Process {
	return &Process{name: name, state: ProcessRunning}
}

// Name returns the process's name.
func (p *Process) Name() string { return p.name }

// State returns what the process is doing.
func (p *Process) State() ProcessState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

// Runnable reports whether the process should be stepped.
func (p *Process) Runnable() bool { return p.State() == ProcessRunning }

// Crashed reports whether the process has crashed and not restarted.
func (p *Process) Crashed() bool { return p.State() == ProcessCrashed }

// Stalled reports whether the process is stalled.
func (p *Process) Stalled() bool { return p.State() == ProcessStalled }

// Generation counts restarts: 0 for the process as first started.
func (p *Process) Generation() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.generation
}

// Crash kills a running or stalled process.
func (p *Process) Crash() error {
	return p.move("crash", ProcessCrashed, func() { p.crashes++ }, ProcessRunning, ProcessStalled)
}

// Restart starts a new generation of a crashed process. A process that is
// running or stalled must crash first.
func (p *Process) Restart() error {
	return p.move("restart", ProcessRunning, func() { p.generation++ }, ProcessCrashed)
}

// Stall stops stepping a running process.
func (p *Process) Stall() error {
	return p.move("stall", ProcessStalled, func() { p.stalls++ }, ProcessRunning)
}

// Resume resumes a stalled process.
func (p *Process) Resume() error {
	return p.move("resume", ProcessRunning, func() {}, ProcessStalled)
}

// move changes state to to if the state is one of from.
func (p *Process) move(action string, to ProcessState, then func(), from ...ProcessState) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range from {
		if p.state == f {
			p.state = to
			then()
			return nil
		}
	}
	return fmt.Errorf("process %s: cannot %s while %s: %w", p.name, action, p.state, ErrProcessState)
}

// String renders e.g. "process w1: running generation=1 crashes=1 stalls=0".
func (p *Process) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("process %s: %s generation=%d crashes=%d stalls=%d", p.name, p.state, p.generation, p.crashes, p.stalls)
}

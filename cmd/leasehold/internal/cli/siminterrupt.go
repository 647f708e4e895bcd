package cli

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// simSignalGrace is how long an interrupted run waits to learn which
// signal ended its context: the signal package hands one signal to every
// channel watching for it, so it is there within microseconds.
const simSignalGrace = 100 * time.Millisecond

// simInterrupt tells a sim run that it was interrupted: by SIGINT or
// SIGTERM, or by its context ending. Stop is closed then; the run stops
// starting seeds, finishes and prints what it has, and exits with Code.
type simInterrupt struct {
	stop chan struct{}
	sig  chan os.Signal
	done chan struct{}

	mu  sync.Mutex
	got os.Signal
}

// watchInterrupt watches ctx and the process's SIGINT and SIGTERM until
// release is called.
func watchInterrupt(ctx context.Context) (i *simInterrupt, release func()) {
	i = &simInterrupt{stop: make(chan struct{}), sig: make(chan os.Signal, 1), done: make(chan struct{})}
	signal.Notify(i.sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case s := <-i.sig:
			i.mu.Lock()
			i.got = s
			i.mu.Unlock()
		case <-ctx.Done():
		case <-i.done:
			return
		}
		close(i.stop)
	}()
	return i, func() {
		signal.Stop(i.sig)
		close(i.done)
	}
}

// Stop is closed once the run is interrupted.
func (i *simInterrupt) Stop() <-chan struct{} { return i.stop }

// Interrupted reports whether the run has been interrupted.
func (i *simInterrupt) Interrupted() bool {
	select {
	case <-i.stop:
		return true
	default:
		return false
	}
}

// Code is the exit code of an interrupted run: 128 plus the signal's
// number (130 for SIGINT, 143 for SIGTERM), as shells report a process a
// signal ended, or exitFail when its context ended without a signal.
func (i *simInterrupt) Code() int {
	i.mu.Lock()
	s := i.got
	i.mu.Unlock()
	if s == nil {
		// The context may have ended for a signal whose copy for this
		// watcher is still on its way.
		select {
		case s = <-i.sig:
			i.mu.Lock()
			i.got = s
			i.mu.Unlock()
		case <-time.After(simSignalGrace):
		}
	}
	if n, ok := s.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return exitFail
}

// Name names what interrupted the run, for its last line.
func (i *simInterrupt) Name() string {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.got == nil {
		return "its context ended"
	}
	return i.got.String()
}

package httpapi

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// Bounds of the slowing of failed authentication.
const (
	// AuthDelayDefault is the delay of the second failure in a row from
	// one remote host; each further failure doubles it, up to
	// authDelayMax. The first failure is answered at once.
	AuthDelayDefault = 250 * time.Millisecond
	authDelayMax     = 4 * time.Second
	// authForgetAfter is how long a host's failures are remembered after
	// its last one.
	authForgetAfter = 10 * time.Minute
	// authHostsMax bounds the hosts remembered; past it, hosts whose
	// failures are forgotten are dropped first, then every host.
	authHostsMax = 4096
)

// authGate slows failed authentication per remote host, on an injected
// clock, so that guessing secrets from one address is slow.
type authGate struct {
	clock clockwork.Clock
	base  time.Duration // 0: no slowing
	mu    sync.Mutex
	hosts map[string]authFailures
}

type authFailures struct {
	count int
	last  time.Time
}

// failed records a failure from host and returns how long to wait before
// answering it.
func (g *authGate) failed(host string) time.Duration {
	if g.base <= 0 {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.clock.Now()
	if g.hosts == nil {
		g.hosts = map[string]authFailures{}
	}
	f := g.hosts[host]
	if now.Sub(f.last) > authForgetAfter {
		f = authFailures{}
	}
	if _, known := g.hosts[host]; !known && len(g.hosts) >= authHostsMax {
		g.forget(now)
	}
	f.count++
	f.last = now
	g.hosts[host] = f
	if f.count == 1 {
		return 0
	}
	d := g.base
	for i := 2; i < f.count && d < authDelayMax; i++ {
		d *= 2
	}
	return min(d, authDelayMax)
}

// forget drops the hosts whose failures are old, or every host if none
// is.
func (g *authGate) forget(now time.Time) {
	for h, f := range g.hosts {
		if now.Sub(f.last) > authForgetAfter {
			delete(g.hosts, h)
		}
	}
	if len(g.hosts) >= authHostsMax {
		clear(g.hosts)
	}
}

// wait waits d on the gate's clock, or until ctx ends.
func (g *authGate) wait(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := g.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.Chan():
	case <-ctx.Done():
	}
}

// hostOf is the host of a remote address ("127.0.0.1:5000" -> "127.0.0.1"),
// so that one machine's connections share one count.
func hostOf(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return remoteAddr
	}
	return host
}

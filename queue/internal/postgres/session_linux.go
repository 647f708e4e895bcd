package postgres

import (
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// userTimeoutControl returns a dialer's Control that sets TCP_USER_TIMEOUT
// on the socket: the connection is dropped once data sent on it (a
// keepalive probe included) stays unacknowledged for d. Zero leaves the
// system's default; a Unix socket (a host given as a directory) has no
// such option.
func userTimeoutControl(d time.Duration) func(network, address string, c syscall.RawConn) error {
	if d <= 0 {
		return nil
	}
	return func(network, _ string, c syscall.RawConn) error {
		if !strings.HasPrefix(network, "tcp") {
			return nil
		}
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
		})
		if err != nil {
			return err
		}
		return serr
	}
}

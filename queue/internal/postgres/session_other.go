//go:build !linux

package postgres

import (
	"syscall"
	"time"
)

// userTimeoutControl sets nothing where TCP_USER_TIMEOUT is Linux's alone:
// the keepalive (and the server's tcp_user_timeout) still apply.
func userTimeoutControl(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}

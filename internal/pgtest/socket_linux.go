package pgtest

import (
	"errors"
	"net"
	"testing"

	"golang.org/x/sys/unix"
)

// SocketOptions reads the client side of a connection's socket:
// SO_KEEPALIVE, TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT (seconds,
// seconds, probes) and TCP_USER_TIMEOUT (milliseconds), which the
// store's session settings set on every connection it opens.
func SocketOptions(tb testing.TB, c net.Conn) []int {
	tb.Helper()
	tcp, ok := c.(*net.TCPConn)
	if !ok {
		tb.Fatalf("a TCP connection, got %T", c)
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		tb.Fatal(err)
	}
	var out []int
	var serr error
	err = raw.Control(func(fd uintptr) {
		for _, o := range [][2]int{{unix.SOL_SOCKET, unix.SO_KEEPALIVE}, {unix.IPPROTO_TCP, unix.TCP_KEEPIDLE},
			{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL}, {unix.IPPROTO_TCP, unix.TCP_KEEPCNT}, {unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT}} {
			v, err := unix.GetsockoptInt(int(fd), o[0], o[1])
			serr = errors.Join(serr, err)
			out = append(out, v)
		}
	})
	if err = errors.Join(err, serr); err != nil {
		tb.Fatal(err)
	}
	return out
}

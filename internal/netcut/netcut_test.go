package netcut

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// guard bounds every wait: a failure deadline, never a synchronisation.
const guard = 10 * time.Second

// echoServer echoes each line back and hands it to got.
func echoServer(t *testing.T) (string, <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	got := make(chan string, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					got <- line
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), got
}

func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(guard):
		t.Fatalf("nothing within %s: %s", guard, what)
		var zero T
		return zero
	}
}

// TestCutHoldsAndRestoreDelivers: bytes sent across a cut link reach the
// server only after Restore, in order; a connection opened during the cut
// waits too; Close ends every connection.
func TestCutHoldsAndRestoreDelivers(t *testing.T) {
	target, got := echoServer(t)
	p, err := Listen(target)
	require.NoError(t, err)

	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	r := bufio.NewReader(c)
	_, err = c.Write([]byte("before\n"))
	require.NoError(t, err)
	require.Equal(t, "before\n", within(t, got, "the server reading the line sent before the cut"))
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "before\n", line)

	p.Cut()
	_, err = c.Write([]byte("during\n"))
	require.NoError(t, err)
	within(t, p.Held(), "the proxy holding the line sent during the cut")
	second, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	_, err = second.Write([]byte("opened during\n"))
	require.NoError(t, err)
	select {
	case line := <-got:
		t.Fatalf("the server read %q across a cut link", line)
	default:
	}

	p.Restore()
	received := []string{within(t, got, "a held line"), within(t, got, "the other held line")}
	require.ElementsMatch(t, []string{"during\n", "opened during\n"}, received)
	line, err = r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "during\n", line)

	require.NoError(t, p.Close())
	_, err = r.ReadString('\n')
	require.Error(t, err, "Close ends the client's connection")
	second.Close()
	c.Close()
}

// TestCutAtHoldsTheChunkItRecognises: a cut armed for the server's answers
// lets every other chunk through, holds the one it recognises (the client
// does not get it) and everything after it in both directions, until
// Restore delivers them in order.
func TestCutAtHoldsTheChunkItRecognises(t *testing.T) {
	target, got := echoServer(t)
	p, err := Listen(target)
	require.NoError(t, err)
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	r := bufio.NewReader(c)
	p.CutAt(ToClient, func(chunk []byte) bool { return string(chunk) == "mark\n" })

	for _, line := range []string{"one\n", "mark\n"} {
		_, err = c.Write([]byte(line))
		require.NoError(t, err)
		require.Equal(t, line, within(t, got, "the server reading "+line), "a chunk to the server passes, even the mark")
	}
	reply, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "one\n", reply, "the answer before the mark passes")
	within(t, p.Held(), "the proxy holding the server's answer it recognised")
	_, err = c.Write([]byte("after\n"))
	require.NoError(t, err)
	within(t, p.Held(), "the proxy holding the client's next line")
	select {
	case line := <-got:
		t.Fatalf("the server read %q across the cut", line)
	default:
	}

	p.Restore()
	for _, want := range []string{"mark\n", "after\n"} {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, want, line, "delivered in order once restored")
	}
	require.Equal(t, "after\n", within(t, got, "the server reading the line held"))
}

package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// live is a command running in the background, its output read line by
// line as it is printed.
type live struct {
	lines  chan string
	code   chan int
	cancel context.CancelFunc
}

// start runs the fixture's command name with args until it exits or stop
// is called.
func (f *fixture) start(name string, args ...string) *live {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	pr, pw := io.Pipe()
	l := &live{lines: make(chan string, 1000), code: make(chan int, 1), cancel: cancel}
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			l.lines <- sc.Text()
		}
		close(l.lines)
	}()
	go func() {
		var errOut strings.Builder
		code := run(&env{ctx: ctx, stdout: pw, stderr: &errOut}, append([]string{name, "--db", f.db}, args...))
		pw.Close()
		l.code <- code
	}()
	f.t.Cleanup(cancel)
	return l
}

// until reads lines until one contains want, and returns them.
func (l *live) until(t *testing.T, want string) []string {
	t.Helper()
	var got []string
	for line := range l.lines {
		got = append(got, line)
		if strings.Contains(line, want) {
			return got
		}
	}
	t.Fatalf("the output ended without %q: %q", want, got)
	return nil
}

// TestStatusWatch: status --watch prints the task, then each change as
// another process makes it, and exits once the task is terminal.
func TestStatusWatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.submit("ana", "k1", onePayload)
	w := f.start("status", id, "--watch")
	w.until(t, "budget")
	requireOK(t, f.do("cancel", id, "--actor", "ops"))
	lines := w.until(t, "now cancelled")
	require.Contains(t, strings.Join(lines, "\n"), "queued->cancelled")
	require.Equal(t, exitOK, <-w.code, "a watch ends when the task is terminal")

	// On a terminal task it prints once and ends; --json prints records.
	r := f.do("status", id, "--watch", "--json")
	requireOK(t, r)
	require.Equal(t, 1, strings.Count(r.stdout, "\n"))
}

// TestEventsFollow: events --follow prints the trail, then each event as
// it is written, one JSON line each with --json, until interrupted; with
// --after it starts after that sequence number, missing and repeating
// nothing.
func TestEventsFollow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a := f.submit("ana", "k1", onePayload)
	w := f.start("events", "--follow", "--json")
	first := decodeEvent(t, w.until(t, a)[0])
	b := f.submit("bo", "k1", onePayload)
	second := decodeEvent(t, w.until(t, b)[0])
	require.Greater(t, second["seq"].(float64), first["seq"].(float64))
	w.cancel()
	require.Equal(t, exitOK, <-w.code, "an interrupt ends a follow normally")

	requireOK(t, f.do("cancel", a, "--actor", "ops"))
	one := f.start("events", a, "--follow", "--after", "1", "--json")
	ev := decodeEvent(t, one.until(t, "cancelled")[0])
	require.Equal(t, a, ev["task_id"])
	require.Equal(t, "queued", ev["from"])
	one.cancel()
	require.Equal(t, exitOK, <-one.code)

	requireUsage(t, f.do("events"), "TASK")
	requireUsage(t, f.do("events", a, "--after", "3"), "--after")
	requireUsage(t, f.do("events", a, b, "--follow"), "one TASK")
}

func decodeEvent(t *testing.T, line string) map[string]any {
	t.Helper()
	var e map[string]any
	require.NoError(t, json.Unmarshal([]byte(line), &e), line)
	return e
}

// TestListPages: --limit cuts the list short with a line saying how to go
// on, --after goes on from the cursor, --json carries next, and --limit 0
// is refused.
func TestListPages(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var ids []string
	for _, key := range []string{"k1", "k2", "k3"} {
		ids = append(ids, f.submit("ana", key, onePayload))
	}
	r := f.do("list", "--limit", "2")
	requireOK(t, r)
	require.Contains(t, r.stdout, ids[0])
	require.Contains(t, r.stdout, ids[1])
	require.NotContains(t, r.stdout, ids[2])
	require.Contains(t, r.stdout, "(cut short at 2 tasks; more follow: list --after ")

	r = f.do("list", "--limit", "2", "--json")
	requireOK(t, r)
	var page struct {
		Tasks []map[string]any `json:"tasks"`
		Next  string           `json:"next"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page))
	require.Len(t, page.Tasks, 2)
	require.NotEmpty(t, page.Next)
	r = f.do("list", "--after", page.Next, "--json")
	requireOK(t, r)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page))
	require.Len(t, page.Tasks, 1)
	require.Equal(t, ids[2], page.Tasks[0]["id"])
	require.Empty(t, page.Next)
	r = f.do("list", "--after", "2")
	requireOK(t, r)
	require.NotContains(t, r.stdout, "cut short")

	requireUsage(t, f.do("list", "--limit", "0"), "--limit")
	requireUsage(t, f.do("list", "--after", "x"), "--after")
}

// TestServeStrictTokens: serve --strict-tokens refuses a token line that
// names no users, before it opens the database or takes a port, and its
// error names the line, never the secret.
func TestServeStrictTokens(t *testing.T) {
	t.Parallel()
	f := newMissing(t)
	tokens := filepath.Join(f.dir, "tokens")
	const secret = "strict-secret-0123456789"
	require.NoError(t, os.WriteFile(tokens, []byte("# tokens\nana submit "+secret+"\n"), 0o600))
	r := f.do("serve", "--addr", "127.0.0.1:0", "--tokens", tokens, "--strict-tokens")
	requireUsage(t, r, "line 2", "no USERS field")
	require.NotContains(t, r.stderr, secret)
	_, err := os.Stat(f.db)
	require.True(t, os.IsNotExist(err), "no database was created")
}

package command_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/worker"
	"github.com/leasehold/leasehold/worker/command"
)

// logBuffer is a logger whose records a test can read.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// script writes a /bin/sh script into dir and returns its path.
func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o700))
	return path
}

func handler(t *testing.T, cfg command.Config) *command.Handler {
	t.Helper()
	if cfg.Kind == "" {
		cfg.Kind = "report"
	}
	if cfg.Service == "" {
		cfg.Service = worker.Dedup
	}
	if cfg.Grace == 0 {
		cfg.Grace = 5 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	h, err := command.New(cfg)
	require.NoError(t, err)
	return h
}

var task = model.Task{ID: "t_00000000000000a1", Attempt: 3, Version: 3, Payload: `{"month":"2026-11"}`}

// runOnce runs h's one step of task.
func runOnce(t *testing.T, h *command.Handler, ctx context.Context) (string, error) {
	t.Helper()
	plan, err := h.Plan(task)
	require.NoError(t, err)
	require.Len(t, plan, 1)
	return h.Run(ctx, task, 0, plan[0])
}

func TestRunGivesPayloadAndEnvironment(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "seen")
	sh := script(t, dir, "run.sh", `cat > "`+out+`.stdin"
env | grep '^LEASEHOLD_' | sort > "`+out+`.env"
echo first line
echo
echo "result for $LEASEHOLD_OPERATION_ID"
echo
`)
	h := handler(t, command.Config{Command: []string{"/bin/sh", sh}, Env: []string{"PATH=/usr/bin:/bin", "LEASEHOLD_DB=postgres://secret@db/x"}})
	res, err := runOnce(t, h, context.Background())
	require.NoError(t, err)
	require.Equal(t, "result for t_00000000000000a1.s0", res, "the last non-empty stdout line")

	stdin, err := os.ReadFile(out + ".stdin")
	require.NoError(t, err)
	require.Equal(t, task.Payload, string(stdin))
	env, err := os.ReadFile(out + ".env")
	require.NoError(t, err)
	require.Equal(t, strings.Join([]string{
		"LEASEHOLD_ATTEMPT=3", "LEASEHOLD_FENCE=3", "LEASEHOLD_KIND=report",
		"LEASEHOLD_OPERATION_ID=t_00000000000000a1.s0", "LEASEHOLD_STEP=0", "LEASEHOLD_TASK_ID=t_00000000000000a1", ""}, "\n"),
		string(env), "the worker's own LEASEHOLD_ variables are not passed on")
}

func TestExitStatusIsClassified(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		body      string
		transient bool
	}{
		{"exit 75", true},
		{"exit 3", false},
		{"exit 1", false},
		{`kill -9 $$`, true},
	} {
		t.Run(tc.body, func(t *testing.T) {
			h := handler(t, command.Config{Command: []string{"/bin/sh", "-c", "echo partial; " + tc.body}, Dir: dir})
			_, err := runOnce(t, h, context.Background())
			require.Error(t, err)
			require.Equal(t, !tc.transient, errors.Is(err, worker.ErrPermanent), "%v", err)
			require.Equal(t, tc.transient, worker.Classify(err) == model.Transient)
			require.NotContains(t, err.Error(), "partial", "output never reaches an error")
		})
	}
	h := handler(t, command.Config{Command: []string{filepath.Join(dir, "missing")}})
	_, err := runOnce(t, h, context.Background())
	require.ErrorIs(t, err, worker.ErrPermanent)
}

func TestOutputIsBounded(t *testing.T) {
	var logs logBuffer
	long := strings.Repeat("x", model.ResultMax+100)
	body := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do echo "err $i" >&2; i=$((i+1)); done
printf '%%s\n' "%s"
printf 'y%%sé' "%s"`, command.StderrLinesMax+5, long, long[:model.ResultMax-2])
	h := handler(t, command.Config{Command: []string{"/bin/sh", "-c", body}, Logger: logs.logger()})
	res, err := runOnce(t, h, context.Background())
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(res, "yx"), "the last line, even without its newline")
	require.Equal(t, model.ResultMax-1, len(res), "cut at a character's boundary")

	text := logs.String()
	require.Equal(t, command.StderrLinesMax, strings.Count(text, `msg="command stderr"`))
	require.Contains(t, text, "lines_dropped=5")
	require.Contains(t, text, `line="err 0"`)
	require.NotContains(t, text, fmt.Sprintf(`line="err %d"`, command.StderrLinesMax))
}

// fifo makes a named pipe a script writes to when it is ready, and
// returns a function that waits (bounded) for its line.
func fifo(t *testing.T, dir string) (string, func() string) {
	t.Helper()
	path := filepath.Join(dir, "ready")
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	lines := make(chan string, 1)
	go func() {
		f, err := os.Open(path) // blocks until the script opens it
		if err != nil {
			lines <- "open: " + err.Error()
			return
		}
		defer f.Close()
		line, _ := bufio.NewReader(f).ReadString('\n')
		lines <- strings.TrimSpace(line)
	}()
	return path, func() string {
		select {
		case l := <-lines:
			return l
		case <-time.After(20 * time.Second):
			t.Fatal("the script never said it was ready")
			return ""
		}
	}
}

// A cancelled run: the process group gets SIGTERM (the script records
// it, and its child in the group is gone too), and the error carries the
// context's cause.
func TestCancelSendsSIGTERMToTheGroup(t *testing.T) {
	dir := t.TempDir()
	ready, wait := fifo(t, dir)
	got := filepath.Join(dir, "got")
	sh := script(t, dir, "long.sh", `sleep 60 &
echo $! > "`+got+`.child"
trap 'echo TERM > "`+got+`"; exit 0' TERM
echo ready > "`+ready+`"
while :; do sleep 1; done
`)
	h := handler(t, command.Config{Command: []string{"/bin/sh", sh}})
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := runOnce(t, h, ctx)
		done <- err
	}()
	require.Equal(t, "ready", wait())
	cancel(worker.ErrCancelRequested)
	var err error
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the run did not end after SIGTERM")
	}
	// The script exits 0 on TERM: what it did counts as done.
	require.NoError(t, err)
	term, rerr := os.ReadFile(got)
	require.NoError(t, rerr)
	require.Equal(t, "TERM\n", string(term))
	requireGone(t, got+".child")
}

// requireGone checks that the process whose PID the file holds ends (or
// is a zombie) within a bound: a SIGKILL takes effect asynchronously.
func requireGone(t *testing.T, pidFile string) {
	t.Helper()
	pid, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	stat := "/proc/" + strings.TrimSpace(string(pid)) + "/stat"
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(stat)
		if err != nil {
			return // gone
		}
		fields := strings.Fields(string(b))
		require.GreaterOrEqual(t, len(fields), 3)
		if fields[2] == "Z" || fields[2] == "X" {
			return
		}
		require.True(t, time.Now().Before(deadline), "the child left in the group still runs (state %s)", fields[2])
		time.Sleep(10 * time.Millisecond)
	}
}

// A command that ignores SIGTERM gets SIGKILL once the grace has passed
// on the handler's clock, and the run ends with the context's cause.
func TestSIGKILLAfterGrace(t *testing.T) {
	dir := t.TempDir()
	ready, wait := fifo(t, dir)
	sh := script(t, dir, "stubborn.sh", `trap '' TERM
echo ready > "`+ready+`"
while :; do sleep 1; done
`)
	clock := clockwork.NewFakeClock()
	h := handler(t, command.Config{Command: []string{"/bin/sh", sh}, Grace: 7 * time.Second, Clock: clock})
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := runOnce(t, h, ctx)
		done <- err
	}()
	require.Equal(t, "ready", wait())
	cancel(worker.ErrLeaseLost)
	bctx, bcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer bcancel()
	require.NoError(t, clock.BlockUntilContext(bctx, 1), "the handler waits out the grace on its clock")
	select {
	case err := <-done:
		t.Fatalf("the run ended before the grace passed: %v", err)
	default:
	}
	clock.Advance(7 * time.Second)
	select {
	case err := <-done:
		require.ErrorIs(t, err, worker.ErrLeaseLost)
	case <-time.After(20 * time.Second):
		t.Fatal("the run did not end after SIGKILL")
	}
}

func TestNewRefuses(t *testing.T) {
	clock := clockwork.NewRealClock()
	for _, cfg := range []command.Config{
		{Kind: "Bad", Command: []string{"x"}, Service: worker.Dedup, Grace: time.Second, Clock: clock},
		{Kind: "a", Service: worker.Dedup, Grace: time.Second, Clock: clock},
		{Kind: "a", Command: []string{"x"}, Service: worker.Queryable, Grace: time.Second, Clock: clock},
		{Kind: "a", Command: []string{"x"}, Service: worker.Fenced, Grace: time.Second, Clock: clock},
		{Kind: "a", Command: []string{"x"}, Service: worker.Dedup, Clock: clock},
		{Kind: "a", Command: []string{"x"}, Service: worker.Dedup, Grace: time.Second},
	} {
		_, err := command.New(cfg)
		require.Error(t, err, "%+v", cfg)
	}
}

// Wait returns once the handler's processes have ended, and not before.
func TestWaitForRunsInFlight(t *testing.T) {
	dir := t.TempDir()
	ready, wait := fifo(t, dir)
	sh := script(t, dir, "wait.sh", `echo ready > "`+ready+`"
while :; do sleep 1; done
`)
	h := handler(t, command.Config{Command: []string{"/bin/sh", sh}, Grace: time.Second})
	require.NoError(t, h.Wait(context.Background()), "nothing in flight")
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = runOnce(t, h, ctx)
	}()
	require.Equal(t, "ready", wait())
	short, stop := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer stop()
	require.ErrorIs(t, h.Wait(short), context.DeadlineExceeded, "a process still runs")
	cancel(worker.ErrShutdown)
	bounded, stop2 := context.WithTimeout(context.Background(), 20*time.Second)
	defer stop2()
	require.NoError(t, h.Wait(bounded))
	<-done
}

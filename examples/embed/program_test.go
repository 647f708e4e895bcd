package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/testkit"
	"github.com/leasehold/leasehold/model"
)

// The tests build the program with go build and run it as a process of
// its own, as its users would, on a free port and a SQLite file of the
// test's.

// The secrets of the program's tokens in the tests. Its log must never
// hold one.
const (
	clerkSecret   = "clerk-secret-0123456789abcdef"
	managerSecret = "manager-secret-0123456789abcdef"
)

// programStart bounds the program's start: the build happened before.
const programStart = 30 * time.Second

// programStop bounds its graceful stop after SIGTERM: the worker's drain
// (shutdownGrace) and the server's.
const programStop = shutdownGrace + 20*time.Second

// programPath is the program TestMain built.
var programPath string

// TestMain builds the program once, into a directory it removes after
// the tests.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "leasehold-embed")
	if err != nil {
		fmt.Fprintln(os.Stderr, "embed tests:", err)
		os.Exit(1)
	}
	programPath = filepath.Join(dir, "embed")
	if out, err := exec.Command("go", "build", "-o", programPath, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "embed tests: go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// program is one running process of the program.
type program struct {
	cmd    *exec.Cmd
	base   string // http://127.0.0.1:PORT
	log    *testkit.SyncBuffer
	exited chan error // the process's exit
	// stopped is set once stop has seen the process exit.
	stopped bool
}

// servingLine is the program's first line of output, naming its URL.
var servingLine = regexp.MustCompile(`^embed: serving (http://127\.0\.0\.1:[0-9]+) `)

// startProgram starts the program with its tokens' secrets, on a free
// port and a new SQLite file, and waits for the line that says where it
// serves. The test's cleanup stops it, if the test did not.
func startProgram(t *testing.T) *program {
	t.Helper()
	db := filepath.Join(t.TempDir(), "embed.db")
	cmd := exec.Command(programPath, "--addr", "127.0.0.1:0", "--db", db)
	cmd.Env = append(os.Environ(), clerkSecretEnv+"="+clerkSecret, managerSecretEnv+"="+managerSecret)
	p := &program{cmd: cmd, log: &testkit.SyncBuffer{}, exited: make(chan error, 1)}
	cmd.Stderr = p.log
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	first := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		first <- line
		_, _ = io.Copy(io.Discard, stdout)
		p.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if !p.stopped {
			_ = cmd.Process.Kill()
			<-p.exited
		}
	})
	select {
	case line := <-first:
		m := servingLine.FindStringSubmatch(line)
		require.NotNil(t, m, "the first line names the URL: %q\nlog:\n%s", line, p.log)
		p.base = m[1]
	case <-time.After(programStart):
		t.Fatalf("the program did not say where it serves within %s; log:\n%s", programStart, p.log)
	}
	return p
}

// stop sends SIGTERM and requires a graceful exit (status 0) whose log
// holds no secret.
func (p *program) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-p.exited:
		p.stopped = true
		require.NoError(t, err, "a graceful stop exits 0; log:\n%s", p.log)
	case <-time.After(programStop):
		t.Fatalf("the program did not stop within %s of SIGTERM; log:\n%s", programStop, p.log)
	}
	log := p.log.String()
	require.Contains(t, log, `"msg":"worker stopped"`, "the worker drained")
	for _, secret := range []string{clerkSecret, managerSecret} {
		require.NotContains(t, log, secret, "no secret reaches the log")
	}
}

// client is a client of the program's API with secret.
func (p *program) client(t *testing.T, secret string) *client.Client {
	t.Helper()
	c, err := client.New(p.base, secret)
	require.NoError(t, err)
	return c
}

// waitEnded waits, by long-polls on the task (WaitTask), until it has
// ended, and returns it as it ended.
func waitEnded(ctx context.Context, t *testing.T, c *client.Client, id string) client.Task {
	t.Helper()
	task, err := c.Task(ctx, id)
	require.NoError(t, err)
	for range waitsMax {
		if task.State.Terminal() {
			return task
		}
		task, err = c.WaitTask(ctx, id, task.LastEventSeq, 30*time.Second)
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		require.NoError(t, err)
	}
	t.Fatalf("task %s has not ended: %s after %d waits", id, task.State, waitsMax)
	return client.Task{}
}

// waitsMax bounds the long-polls on one task: each returns at the task's
// next event, and a task of the program has fewer than a dozen.
const waitsMax = 20

// submitted is a task the tests submit, and what it ends with.
type submitted struct {
	req    model.SubmitRequest
	result string
	cost   int64
	steps  int
}

// reportAndInvoice are a task of each kind the program serves, for users
// the clerk acts for.
var reportAndInvoice = []submitted{
	{req: model.SubmitRequest{User: "acme", Key: "report-2026-03", Kind: "report", Payload: `{"month":"2026-03"}`,
		CostBudget: 1, StepsMax: 1},
		result: "report for 2026-03 written", steps: 1},
	{req: model.SubmitRequest{User: "globex", Key: "invoice-7", Kind: "invoice",
		Payload:    `{"customer":"globex","lines":[{"item":"paper","quantity":2,"cents":450},{"item":"ink","quantity":1,"cents":350}]}`,
		CostBudget: 5, StepsMax: 2},
		result: "invoice for globex: 2 lines, 12.50", cost: 2, steps: 2},
}

package cli

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"
)

// processArgsEnv carries the arguments of a leasehold process that the
// test binary runs as itself (TestLeaseholdProcess), separated by \x1f.
const processArgsEnv = "LEASEHOLD_TEST_PROCESS_ARGS"

// TestLeaseholdProcess is not a test: started by another test with
// processArgsEnv set, it runs leasehold as main does (SIGTERM stops it
// gracefully) and exits with its code.
func TestLeaseholdProcess(t *testing.T) {
	args := os.Getenv(processArgsEnv)
	if args == "" {
		t.Skip("run as a leasehold process by other tests")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(&env{ctx: ctx, stdout: os.Stdout, stderr: os.Stderr}, strings.Split(args, "\x1f")))
}

// A worker holding a claim on a database another process has locked is
// stopped with SIGTERM: its release cannot commit, and it used to wait for
// the lock without bound. It exits 1 within its shutdown grace (the lease,
// 3s), after logging the claim it left with its task ID, attempt and fence.
func TestWorkerStopOnALockedDatabaseEndsWithinTheGrace(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "q.db")
	makeDB(t, db)
	r := lh(t, "submit", "--db", db, "--user", "ana", "--key", "long-1", "--payload",
		`{"steps":[{"cost":1,"duration_ms":600000}]}`, "--cost-budget", "5", "--steps-max", "2")
	require.Equal(t, exitOK, r.code, "%s", r)
	task := strings.TrimSpace(r.stdout)

	const lease = 3 * time.Second
	cmd := exec.Command(os.Args[0], "-test.run=^TestLeaseholdProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), processArgsEnv+"="+strings.Join([]string{"worker", "--db", db, "--id", "w1",
		"--lease", lease.String(), "--busy-timeout", "10s"}, "\x1f"))
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	lines := make(chan string, 256)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	// Wait for the claim, on the worker's own log (bounded).
	var log []string
	awaitLine := func(want string, bound time.Duration) {
		t.Helper()
		timeout := time.After(bound)
		for {
			select {
			case l, ok := <-lines:
				require.True(t, ok, "the worker ended before logging %q:\n%s", want, strings.Join(log, "\n"))
				log = append(log, l)
				if strings.Contains(l, want) {
					return
				}
			case <-timeout:
				t.Fatalf("no %q logged within %s:\n%s", want, bound, strings.Join(log, "\n"))
			}
		}
	}
	awaitLine(`"msg":"task claimed"`, 20*time.Second)

	// Another process takes the write lock and keeps it.
	locker, err := sql.Open("sqlite", db+"?_pragma=busy_timeout(10000)")
	require.NoError(t, err)
	defer locker.Close()
	conn, err := locker.Conn(context.Background())
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(context.Background(), "BEGIN EXCLUSIVE")
	require.NoError(t, err)
	defer conn.ExecContext(context.Background(), "ROLLBACK")

	stopped := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	var waitErr error
	select {
	case waitErr = <-exited:
	case <-time.After(lease + 5*time.Second):
		t.Fatalf("the worker did not exit within %s of SIGTERM", lease+5*time.Second)
	}
	took := time.Since(stopped)
	for l := range lines {
		log = append(log, l)
	}
	var exit *exec.ExitError
	require.True(t, errors.As(waitErr, &exit), "exit: %v", waitErr)
	require.Equal(t, exitFail, exit.ExitCode(), "a stop that left a claim exits 1:\n%s", strings.Join(log, "\n"))
	require.Less(t, took, lease+2*time.Second, "exited within the grace (plus process start-up slack)")
	all := strings.Join(log, "\n")
	require.Contains(t, all, `"msg":"claim left to the reaper","worker":"w1","task_id":"`+task+`","attempt":1,`)
	require.Contains(t, all, `"fence":1,`)
	require.Contains(t, all, "leasehold worker: worker w1: claims left to the reaper: 1")
}

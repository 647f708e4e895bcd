package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/randomid"
)

// exampleKinds is the example kinds file, whose scripts the end-to-end
// test runs.
const exampleKinds = "../../../../examples/kinds/kinds.json"

func TestWorkerRefusesABadKindsFile(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "q.db")
	makeDB(t, db)
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"dup.json", `{"kinds": {"a": {"worker": {"command": ["x"], "service": "dedup", "service": "none"}}}}`,
			[]string{"--kinds", "kinds.a.worker.service", "twice"}},
		{"noworker.json", `{"kinds": {"a": {"schema": {"type": "object"}}}}`, []string{"--kinds", "no kind", "worker member"}},
		{"badschema.json", `{"kinds": {"a": {"schema": {"type": 3}}}}`, []string{"--kinds", "kinds.a.schema"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireUsage(t, lh(t, "worker", "--db", db, "--id", "w1", "--kinds", write(tc.name, tc.body)), tc.want...)
		})
	}
	requireUsage(t, lh(t, "worker", "--db", db, "--id", "w1", "--kinds", filepath.Join(dir, "missing.json")), "--kinds")
}

// kindsRun is a SQLite file, a state directory for the example scripts
// and `leasehold worker --kinds` processes over them.
type kindsRun struct {
	t         *testing.T
	ctx       context.Context
	db, state string
	q         *queue.Queue
	keys      int
	workers   []*kindsWorker
}

// kindsWorker is one worker process and its log.
type kindsWorker struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	lines  []string
	logged chan struct{}
	done   bool
}

func newKindsRun(t *testing.T) *kindsRun {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("python3 is not installed: .ci/run installs it")
		}
		t.Skip("python3 is not installed (.ci/run installs it)")
	}
	dir := t.TempDir()
	k := &kindsRun{t: t, ctx: context.Background(), db: filepath.Join(dir, "q.db"), state: filepath.Join(dir, "state")}
	q, err := queue.Open(k.ctx, queue.Options{Path: k.db, Clock: clockwork.NewRealClock(), IDs: randomid.Source{}})
	require.NoError(t, err)
	t.Cleanup(func() { q.Close() })
	k.q = q
	return k
}

func (k *kindsRun) submit(kind, payload string) string {
	k.t.Helper()
	k.keys++
	res, err := k.q.Submit(k.ctx, model.SubmitRequest{User: "ana", Key: fmt.Sprintf("k%d", k.keys), Kind: kind, Payload: payload,
		CostBudget: 1, StepsMax: 1})
	require.NoError(k.t, err)
	return res.TaskID
}

// start runs `leasehold worker --kinds` on the example kinds file as a
// process of its own (this test binary, as TestLeaseholdProcess).
func (k *kindsRun) start(id string) *kindsWorker {
	k.t.Helper()
	kindsFile, err := filepath.Abs(exampleKinds)
	require.NoError(k.t, err)
	w := &kindsWorker{cmd: exec.Command(os.Args[0], "-test.run=^TestLeaseholdProcess$", "-test.count=1"), logged: make(chan struct{})}
	w.cmd.Env = append(os.Environ(), "EXAMPLE_STATE_DIR="+k.state, processArgsEnv+"="+strings.Join([]string{"worker", "--db", k.db,
		"--id", id, "--kinds", kindsFile, "--lease", "500ms", "--concurrency", "3"}, "\x1f"))
	stderr, err := w.cmd.StderrPipe()
	require.NoError(k.t, err)
	require.NoError(k.t, w.cmd.Start())
	go func() {
		defer close(w.logged)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			w.mu.Lock()
			w.lines = append(w.lines, sc.Text())
			w.mu.Unlock()
		}
	}()
	k.workers = append(k.workers, w)
	k.t.Cleanup(func() { w.stop(syscall.SIGTERM) })
	return w
}

// stop sends sig and waits for the process and its log to end.
func (w *kindsWorker) stop(sig syscall.Signal) {
	if w.done {
		return
	}
	w.done = true
	_ = w.cmd.Process.Signal(sig)
	<-w.logged
	_ = w.cmd.Wait()
}

func (w *kindsWorker) log() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.lines)
}

// settled waits (bounded) for task id to end or go to review.
func (k *kindsRun) settled(id string) model.Task {
	k.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		task, err := k.q.Task(k.ctx, id)
		require.NoError(k.t, err)
		if task.State.Terminal() || task.State == model.NeedsReview {
			return task
		}
		if time.Now().After(deadline) {
			var logs []string
			for _, w := range k.workers {
				logs = append(logs, w.log()...)
			}
			k.t.Fatalf("task %s still %s; workers' logs:\n%s", id, task.State, strings.Join(logs, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// await waits (bounded) until the state file name holds want.
func (k *kindsRun) await(name, want string) {
	k.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(k.read(name), want) {
		if time.Now().After(deadline) {
			var logs []string
			for _, w := range k.workers {
				logs = append(logs, w.log()...)
			}
			k.t.Fatalf("%s never held %q; workers' logs:\n%s", name, want, strings.Join(logs, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (k *kindsRun) read(name string) string {
	b, _ := os.ReadFile(filepath.Join(k.state, name))
	return string(b)
}

// The example kinds end to end: `leasehold worker --kinds` (a process of
// its own, on the real clock, over a SQLite file) runs the example
// scripts. A report whose command runs four leases long completes on its
// first attempt, the script's last line its result (status shows it); a
// charge (queryable) is charged once; a notification (none) whose first
// attempt ends without exit 0 goes to needs_review; a cancel during a
// long command ends its task cancelled, the command noting SIGTERM; a
// synthetic task, of no kind the worker serves, is never claimed.
func TestWorkerRunsTheExampleKinds(t *testing.T) {
	k := newKindsRun(t)
	report := k.submit("report", `{"customer": "acme", "month": "2026-11", "seconds": 2}`)
	charge := k.submit("charge", `{"customer": "acme", "cents": 1250}`)
	notify := k.submit("notify", `{"message": "hello", "fail_first": true}`)
	synthetic := k.submit("synthetic", `{"steps": [{"cost": 1}]}`)
	w := k.start("w1")

	task := k.settled(report)
	require.Equal(t, model.Completed, task.State)
	require.Equal(t, 1, task.Attempt, "first attempt, under a lease a quarter of the run")
	result := `{"report": "` + model.OperationID(report, 0) + `", "lines": 3}`
	require.Equal(t, result, task.Result())
	status := lh(t, "status", "--db", k.db, "--json", report)
	require.Equal(t, exitOK, status.code, "%s", status)
	var record struct {
		Kind   string `json:"kind"`
		Result string `json:"result"`
	}
	require.NoError(t, json.Unmarshal([]byte(status.stdout), &record))
	require.Equal(t, "report", record.Kind)
	require.Equal(t, result, record.Result, "status shows the script's last line")

	task = k.settled(charge)
	require.Equal(t, model.Completed, task.State)
	require.Equal(t, 1, strings.Count(k.read("payments"), model.OperationID(charge, 0)))

	task = k.settled(notify)
	require.Equal(t, model.NeedsReview, task.State)
	require.Equal(t, model.UncertainEffect, task.Reason)
	require.Equal(t, 1, strings.Count(k.read("notifications"), model.OperationID(notify, 0)))

	// A cancel during a long command: it gets SIGTERM (and notes it), and
	// the task ends cancelled.
	long := k.submit("report", `{"customer": "acme", "month": "2026-12", "seconds": 60}`)
	op := model.OperationID(long, 0)
	k.await("signals.log", "started "+op)
	cancelled := lh(t, "cancel", "--db", k.db, long)
	require.Equal(t, exitOK, cancelled.code, "%s", cancelled)
	task = k.settled(long)
	require.Equal(t, model.Cancelled, task.State)
	require.Contains(t, k.read("signals.log"), "SIGTERM "+op)

	// A synthetic task is of no kind this worker serves: it never claims it.
	task, err := k.q.Task(k.ctx, synthetic)
	require.NoError(t, err)
	require.Equal(t, model.Queued, task.State)
	require.Zero(t, task.Attempt)

	w.stop(syscall.SIGTERM)
	var started map[string]any
	for _, l := range w.log() {
		if strings.Contains(l, `"msg":"worker started"`) {
			require.NoError(t, json.Unmarshal([]byte(l), &started))
		}
		require.NotContains(t, l, "acme", "payload values never reach the worker's log")
	}
	require.Equal(t, []any{"charge", "notify", "report"}, started["kinds"])
}

// SIGKILL of a `leasehold worker --kinds` process after a queryable
// command charged and before its receipt: another worker process reaps
// the claim, runs the reconcile command, which finds the charge, and
// records the receipt without charging again.
func TestWorkerKindsSIGKILLBetweenIntentAndReceipt(t *testing.T) {
	k := newKindsRun(t)
	charge := k.submit("charge", `{"customer": "acme", "cents": 1250, "pause_seconds": 60}`)
	op := model.OperationID(charge, 0)
	doomed := k.start("w-doomed")
	k.await("payments", op)
	doomed.stop(syscall.SIGKILL)
	// The charge command, in a process group of its own, outlives the
	// worker killed under it: stop it, as an operator would.
	pid, err := strconv.Atoi(strings.TrimSpace(k.read("charge.pid")))
	require.NoError(t, err)
	_ = syscall.Kill(-pid, syscall.SIGKILL)

	k.start("w-next")
	task := k.settled(charge)
	require.Equal(t, model.Completed, task.State)
	require.Equal(t, 2, task.Attempt)
	require.Equal(t, 1, strings.Count(k.read("payments"), op), "charged once")
	require.Equal(t, `{"charged": "`+op+`", "cents": 1250}`, task.Result(), "the reconcile command's answer")
	effects, err := k.q.Effects(k.ctx, charge)
	require.NoError(t, err)
	require.Len(t, effects, 1)
	require.Equal(t, int64(2), effects[0].ReceiptFence)
}

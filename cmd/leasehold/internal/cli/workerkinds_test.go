package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

func TestWorkerRunsTheExampleKinds(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("python3 is not installed: .ci/run installs it")
		}
		t.Skip("python3 is not installed (.ci/run installs it)")
	}
	dir := t.TempDir()
	db, state := filepath.Join(dir, "q.db"), filepath.Join(dir, "state")
	ctx := context.Background()
	q, err := queue.Open(ctx, queue.Options{Path: db, Clock: clockwork.NewRealClock(), IDs: randomid.Source{}})
	require.NoError(t, err)
	defer q.Close()
	keys := 0
	submit := func(kind, payload string) string {
		t.Helper()
		keys++
		res, err := q.Submit(ctx, model.SubmitRequest{User: "ana", Key: fmt.Sprintf("k%d", keys), Kind: kind, Payload: payload,
			CostBudget: 1, StepsMax: 1})
		require.NoError(t, err)
		return res.TaskID
	}
	report := submit("report", `{"customer": "acme", "month": "2026-11", "seconds": 2}`)
	charge := submit("charge", `{"customer": "acme", "cents": 1250}`)
	notify := submit("notify", `{"message": "hello", "fail_first": true}`)
	synthetic := submit("synthetic", `{"steps": [{"cost": 1}]}`)

	kindsFile, err := filepath.Abs(exampleKinds)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^TestLeaseholdProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "EXAMPLE_STATE_DIR="+state, processArgsEnv+"="+strings.Join([]string{"worker", "--db", db,
		"--id", "w1", "--kinds", kindsFile, "--lease", "500ms", "--concurrency", "3"}, "\x1f"))
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var logLines []string
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			logLines = append(logLines, sc.Text())
		}
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_ = cmd.Process.Signal(syscall.SIGTERM)
			<-logged
			_ = cmd.Wait()
		}
	}
	t.Cleanup(stop)

	settled := func(id string) model.Task {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			task, err := q.Task(ctx, id)
			require.NoError(t, err)
			if task.State.Terminal() || task.State == model.NeedsReview {
				return task
			}
			if time.Now().After(deadline) {
				stop()
				t.Fatalf("task %s still %s; worker log:\n%s", id, task.State, strings.Join(logLines, "\n"))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(state, name))
		return string(b)
	}

	task := settled(report)
	require.Equal(t, model.Completed, task.State)
	require.Equal(t, 1, task.Attempt, "first attempt, under a lease a quarter of the run")
	result := `{"report": "` + model.OperationID(report, 0) + `", "lines": 3}`
	require.Equal(t, result, task.Result())
	status := lh(t, "status", "--db", db, "--json", report)
	require.Equal(t, exitOK, status.code, "%s", status)
	var record struct {
		Kind   string `json:"kind"`
		Result string `json:"result"`
	}
	require.NoError(t, json.Unmarshal([]byte(status.stdout), &record))
	require.Equal(t, "report", record.Kind)
	require.Equal(t, result, record.Result, "status shows the script's last line")

	task = settled(charge)
	require.Equal(t, model.Completed, task.State)
	require.Equal(t, 1, strings.Count(read("payments"), model.OperationID(charge, 0)))

	task = settled(notify)
	require.Equal(t, model.NeedsReview, task.State)
	require.Equal(t, model.UncertainEffect, task.Reason)
	require.Equal(t, 1, strings.Count(read("notifications"), model.OperationID(notify, 0)))

	// A cancel during a long command: it gets SIGTERM (and notes it), and
	// the task ends cancelled.
	long := submit("report", `{"customer": "acme", "month": "2026-12", "seconds": 60}`)
	op := model.OperationID(long, 0)
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(read("signals.log"), "started "+op) {
		require.True(t, time.Now().Before(deadline), "the long command never started")
		time.Sleep(20 * time.Millisecond)
	}
	cancelled := lh(t, "cancel", "--db", db, long)
	require.Equal(t, exitOK, cancelled.code, "%s", cancelled)
	task = settled(long)
	require.Equal(t, model.Cancelled, task.State)
	require.Contains(t, read("signals.log"), "SIGTERM "+op)

	// A synthetic task is of no kind this worker serves: it never claims it.
	task, err = q.Task(ctx, synthetic)
	require.NoError(t, err)
	require.Equal(t, model.Queued, task.State)
	require.Zero(t, task.Attempt)

	stop()
	var started map[string]any
	for _, l := range logLines {
		if strings.Contains(l, `"msg":"worker started"`) {
			require.NoError(t, json.Unmarshal([]byte(l), &started))
		}
		require.NotContains(t, l, "acme", "payload values never reach the worker's log")
	}
	require.Equal(t, []any{"charge", "notify", "report"}, started["kinds"])
}

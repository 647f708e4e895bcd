package queue

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// burstDBEnv selects the child mode of TestGroupKilledMidBurst and names
// its database file.
const (
	burstDBEnv      = "LEASEHOLD_BURST_DB"
	burstGoroutines = 8
	burstAcks       = 600 // acknowledgements the parent waits for before the kill
	burstPrefix     = "ACK "
)

// TestGroupKilledMidBurst kills (SIGKILL) a process while its goroutines
// submit, claim and complete through group commits, then checks the
// database: every operation the child acknowledged is there, and nothing
// is half-applied (each task has its submitted event, each claim its
// claimed event, each completion its completed event, and the counters
// the triggers keep agree with the rows).
func TestGroupKilledMidBurst(t *testing.T) {
	if path := os.Getenv(burstDBEnv); path != "" {
		burstChild(path)
		return
	}
	path := filepath.Join(t.TempDir(), "leasehold.db")
	parent := openBundle(t, path, clockwork.NewFakeClockAt(epoch), 99)
	limits := model.DefaultLimits
	limits.DepthMax, limits.UserDepthMax = 0, 0
	require.NoError(t, parent.q.SetLimits(parent.ctx, limits, "test"))
	parent.close()

	cmd := exec.Command(os.Args[0], "-test.run=^TestGroupKilledMidBurst$", "-test.count=1")
	cmd.Env = append(os.Environ(), burstDBEnv+"="+path)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	submitted, claimed, completed := map[string]bool{}, map[string]int64{}, map[string]bool{}
	acks, groups, ops := 0, int64(0), int64(0)
	scanner := bufio.NewScanner(stdout)
	for acks < burstAcks && scanner.Scan() {
		line, ok := strings.CutPrefix(scanner.Text(), burstPrefix)
		if !ok {
			continue
		}
		f := strings.Fields(line)
		switch f[0] {
		case "submitted":
			submitted[f[1]] = true
		case "claimed":
			fence, err := strconv.ParseInt(f[2], 10, 64)
			require.NoError(t, err)
			claimed[f[1]] = fence
		case "completed":
			completed[f[1]] = true
		case "groups":
			groups, _ = strconv.ParseInt(f[1], 10, 64)
			ops, _ = strconv.ParseInt(f[2], 10, 64)
		default:
			require.Failf(t, "unexpected line", "%q", line)
		}
		acks++
	}
	require.Equal(t, burstAcks, acks, "child stopped early: %s", stderr.String())
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	err = cmd.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, syscall.SIGKILL, exit.Sys().(syscall.WaitStatus).Signal())
	require.Greater(t, ops, groups, "the burst was grouped (groups %d, operations %d)", groups, ops)

	after := openBundle(t, path, clockwork.NewFakeClockAt(epoch), 100)
	require.NoError(t, after.q.CheckCounters(after.ctx))
	tasks, err := after.q.List(after.ctx, model.ListFilter{Limit: model.ListLimitMax})
	require.NoError(t, err)
	byID := map[string]model.Task{}
	for _, task := range tasks {
		byID[task.ID] = task
	}
	for id := range submitted {
		require.Contains(t, byID, id, "acknowledged submit lost")
	}
	for id, fence := range claimed {
		require.GreaterOrEqual(t, byID[id].Version, fence, "acknowledged claim of %s lost", id)
	}
	for id := range completed {
		require.Equal(t, model.Completed, byID[id].State, "acknowledged completion of %s lost", id)
	}
	events := map[string]map[model.EventKind]int{}
	for _, e := range after.events("") {
		if events[e.TaskID] == nil {
			events[e.TaskID] = map[model.EventKind]int{}
		}
		events[e.TaskID][e.Kind]++
	}
	for _, task := range tasks {
		kinds := events[task.ID]
		require.Equal(t, 1, kinds[model.EventSubmitted], "task %s", task.ID)
		require.EqualValues(t, task.Version, kinds[model.EventClaimed], "task %s: one claimed event per claim", task.ID)
		if task.State == model.Completed {
			require.Equal(t, 1, kinds[model.EventCompleted], "task %s", task.ID)
		}
	}
	t.Logf("killed after %d acknowledgements (%d submits, %d claims, %d completions; %d operations in %d groups); %d tasks in the database",
		acks, len(submitted), len(claimed), len(completed), ops, groups, len(tasks))
}

// burstChild submits, claims and completes from burstGoroutines goroutines
// until it is killed, printing each acknowledged operation.
func burstChild(path string) {
	ctx := context.Background()
	q, err := Open(ctx, Options{Path: path, Clock: clockwork.NewFakeClockAt(epoch), IDs: model.NewSeededIDs(7)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(1)
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(burstPrefix+format+"\n", args...)
	}
	var wg sync.WaitGroup
	for g := range burstGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker := fmt.Sprintf("w%d", g)
			for i := 0; ; i++ {
				res, err := q.Submit(ctx, model.SubmitRequest{User: fmt.Sprintf("u%d", g), Key: fmt.Sprintf("k%d-%d", g, i),
					Payload: `{}`, CostBudget: 1, StepsMax: 1})
				if err != nil {
					fmt.Fprintln(os.Stderr, "submit:", err)
					os.Exit(1)
				}
				say("submitted %s", res.TaskID)
				cs, err := q.Claim(ctx, model.ClaimRequest{Worker: worker, Max: 1, Lease: time.Hour})
				if err != nil {
					fmt.Fprintln(os.Stderr, "claim:", err)
					os.Exit(1)
				}
				for _, c := range cs {
					say("claimed %s %d", c.Claim.TaskID, c.Claim.Fence)
					if err := q.Complete(ctx, c.Claim); err != nil {
						fmt.Fprintln(os.Stderr, "complete:", err)
						os.Exit(1)
					}
					say("completed %s", c.Claim.TaskID)
				}
				if i%20 == 0 {
					groups, ops := q.GroupStats()
					say("groups %d %d", groups, ops)
				}
			}
		}()
	}
	wg.Wait()
}

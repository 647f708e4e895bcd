package queue

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// The two-process claim race re-executes the test binary as worker
// processes: raceWorkerEnv names the worker and selects the child mode,
// raceDBEnv is the database file.
const (
	raceWorkerEnv = "LEASEHOLD_RACE_WORKER"
	raceDBEnv     = "LEASEHOLD_RACE_DB"
	raceRounds    = 40
	raceBusy      = 10 * time.Second
	// racePrefix marks protocol lines on a child's stdout, apart from
	// anything the test framework prints.
	racePrefix = "RACE "
)

// TestTwoProcessClaimRace runs two OS processes against one database file.
// Each round the parent submits one task and releases both children at
// once (a line on each one's stdin); each child claims once and reports
// whether it won. Exactly one must win, and the other must see an empty
// claim, not an error.
func TestTwoProcessClaimRace(t *testing.T) {
	if worker := os.Getenv(raceWorkerEnv); worker != "" {
		raceChild(t, worker, os.Getenv(raceDBEnv))
		return
	}
	parent := setupFile(t, func(o *Options) { o.BusyTimeout = raceBusy })
	children := []*raceProcess{startRaceChild(t, "proc-a", parent.path), startRaceChild(t, "proc-b", parent.path)}
	for _, c := range children {
		require.Equal(t, "ready", c.next(t), "child %s", c.worker)
	}
	wins := map[string]int{}
	winners := map[string]string{}
	for round := 1; round <= raceRounds; round++ {
		id := parent.submit()
		for _, c := range children {
			_, err := fmt.Fprintf(c.stdin, "%d\n", round)
			require.NoError(t, err)
		}
		var won []string
		for _, c := range children {
			reply := c.next(t)
			number, outcome, _ := strings.Cut(reply, " ")
			require.Equal(t, strconv.Itoa(round), number, "child %s out of step: %q", c.worker, reply)
			switch {
			case outcome == "won "+id:
				won = append(won, c.worker)
				wins[c.worker]++
				winners[id] = c.worker
			case outcome == "lost":
			default:
				require.Failf(t, "unexpected reply", "round %d child %s: %q", round, c.worker, reply)
			}
		}
		require.Len(t, won, 1, "round %d: exactly one process wins", round)
	}
	for _, c := range children {
		c.finish(t)
	}
	t.Logf("wins over %d rounds: %v", raceRounds, wins)

	tasks, err := parent.q.List(parent.ctx, model.ListFilter{Limit: model.ListLimitMax})
	require.NoError(t, err)
	require.Len(t, tasks, raceRounds)
	for _, task := range tasks {
		require.Equal(t, model.Running, task.State)
		require.Equal(t, int64(1), task.Version, "claimed once")
		require.Equal(t, winners[task.ID], task.Owner)
		claims := 0
		for _, e := range parent.events(task.ID) {
			if e.Kind == model.EventClaimed {
				claims++
				require.Equal(t, winners[task.ID], e.Actor)
			}
		}
		require.Equal(t, 1, claims)
	}
	require.Equal(t, int64(raceRounds), parent.metrics().Depth[model.Running])
}

// raceProcess is one child worker process and its pipes.
type raceProcess struct {
	worker string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // protocol lines; closed when stdout ends
	stderr *bytes.Buffer
}

func startRaceChild(t *testing.T, worker, path string) *raceProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestTwoProcessClaimRace$", "-test.count=1")
	cmd.Env = append(os.Environ(), raceWorkerEnv+"="+worker, raceDBEnv+"="+path)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	p := &raceProcess{worker: worker, cmd: cmd, stdin: stdin, lines: make(chan string, 4), stderr: &bytes.Buffer{}}
	cmd.Stderr = p.stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	go func() {
		defer close(p.lines)
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			if line, ok := strings.CutPrefix(scanner.Text(), racePrefix); ok {
				p.lines <- line
			}
		}
	}()
	return p
}

// next returns the child's next protocol line; a child that exits first
// fails the test with its stderr.
func (p *raceProcess) next(t *testing.T) string {
	t.Helper()
	line, ok := <-p.lines
	if !ok {
		err := p.cmd.Wait()
		require.FailNow(t, "child exited", "child %s: %v\n%s", p.worker, err, p.stderr)
	}
	return line
}

// finish closes the child's stdin and requires it to exit cleanly with
// nothing more to say.
func (p *raceProcess) finish(t *testing.T) {
	t.Helper()
	require.NoError(t, p.stdin.Close())
	for line := range p.lines {
		require.Failf(t, "unexpected line", "child %s: %q", p.worker, line)
	}
	require.NoError(t, p.cmd.Wait(), "child %s stderr:\n%s", p.worker, p.stderr)
}

// raceChild is the child mode: open the database, say ready, then claim
// once per line read from stdin and report the outcome.
func raceChild(t *testing.T, worker, path string) {
	ctx := context.Background()
	say := func(format string, args ...any) { fmt.Printf(racePrefix+format+"\n", args...) }
	q, err := Open(ctx, Options{Path: path, Clock: clockwork.NewFakeClockAt(epoch),
		IDs: model.NewSeededIDs(uint64(len(worker))), BusyTimeout: raceBusy})
	if err != nil {
		say("error open: %v", err)
		t.Fatalf("open: %v", err)
	}
	defer q.Close()
	say("ready")
	scanner := bufio.NewScanner(os.Stdin)
	for scanner.Scan() {
		round := scanner.Text()
		cs, err := q.Claim(ctx, model.ClaimRequest{Worker: worker, Max: 1, Lease: time.Minute})
		switch {
		case err != nil:
			say("%s error %v", round, err)
		case len(cs) == 0:
			say("%s lost", round)
		default:
			say("%s won %s", round, cs[0].Claim.TaskID)
		}
	}
	if err := scanner.Err(); err != nil {
		t.Fatalf("read stdin: %v", err)
	}
}

// TestConcurrentOpenOfNewDatabase opens one new database file from several
// queues at once, as worker processes started together do: every open
// succeeds, and the schema is created once.
func TestConcurrentOpenOfNewDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leasehold.db")
	clock := clockwork.NewFakeClockAt(epoch)
	queues := make([]*Queue, 4)
	errs := make([]error, len(queues))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range queues {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			queues[i], errs[i] = Open(context.Background(), Options{Path: path, Clock: clock,
				IDs: model.NewSeededIDs(uint64(i + 1)), BusyTimeout: raceBusy})
		}()
	}
	close(start)
	wg.Wait()
	for i, q := range queues {
		require.NoError(t, errs[i])
		defer q.Close()
	}
	var applied int
	require.NoError(t, queues[0].db.QueryRow("SELECT COUNT(*) FROM schema_migrations").Scan(&applied))
	require.Equal(t, SchemaVersion(), applied)
	for i, q := range queues {
		_, err := q.Submit(context.Background(), model.SubmitRequest{User: "ana", Key: fmt.Sprintf("k%d", i),
			Payload: `{}`, CostBudget: 1, StepsMax: 1})
		require.NoError(t, err)
	}
	require.NoError(t, queues[3].CheckCounters(context.Background()))
}

package queue_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// The PostgreSQL claim race re-executes the test binary as claimer
// processes, each with connections of its own to one schema.
const (
	pgRaceWorkerEnv = "LEASEHOLD_PG_RACE_WORKER"
	pgRaceURLEnv    = "LEASEHOLD_PG_RACE_URL"
	pgRaceClaimers  = 8
	pgRaceTasks     = 24 // of each user
	// pgRaceDepthEvery is how many polls that find nothing a claimer makes
	// between its reads of the depths (whether any task is left).
	pgRaceDepthEvery = 64
	pgRaceLease      = time.Hour // never expires: every claim is settled by its claimer
	pgRaceTimeout    = 2 * time.Minute
	// pgRaceClaimerTimeout bounds a claimer's run, short of pgRaceTimeout
	// so that a stuck claimer says how many tasks it saw left. It is a
	// time, not a count of polls that found nothing: a commit can wait
	// seconds for its WAL flush on a loaded disk (13 s seen here, its
	// backend in WALWrite), and the claimer holding solo's task with it
	// while seven others poll: a bound of 20,000 polls, about 20 s of
	// them, failed one run in ten.
	pgRaceClaimerTimeout = pgRaceTimeout - 20*time.Second
	// pgRaceStartLock is the advisory lock the claimers start behind.
	pgRaceStartLock = 7424699
)

// TestPostgresClaimRace: 8 claimer processes, each with its own pool, claim
// batches from one queue in which user "solo" may run 1 task at a time
// and user "many" is unlimited, and complete what they claim. The audit
// trail, read in sequence order, must never show solo with two claims
// open; every task must be claimed once and completed; the counters must
// agree with the tasks. SKIP LOCKED alone would let two claimers take two
// of solo's tasks at once.
func TestPostgresClaimRace(t *testing.T) {
	if worker := os.Getenv(pgRaceWorkerEnv); worker != "" {
		pgRaceClaimer(t, worker, os.Getenv(pgRaceURLEnv))
		return
	}
	url := pgtest.Fresh(t, migratePostgres)
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(conformanceEpoch)
	q, err := queue.Open(ctx, queue.Options{Path: url, Clock: clock, IDs: model.NewSeededIDs(1)})
	require.NoError(t, err)
	defer q.Close()
	require.NoError(t, q.SetUserLimit(ctx, model.UserLimit{User: "solo", RunningMax: 1, DepthMax: model.Inherit}, "test"))
	for i := range pgRaceTasks {
		for _, user := range []string{"solo", "many"} {
			_, err := q.Submit(ctx, model.SubmitRequest{User: user, Key: fmt.Sprintf("k%d", i), Payload: `{}`,
				CostBudget: 1, StepsMax: 1})
			require.NoError(t, err)
		}
	}

	runCtx, cancel := context.WithTimeout(ctx, pgRaceTimeout)
	defer cancel()
	// The start line: this session holds pgRaceStartLock until every
	// claimer is waiting for it (each opens its queue, then waits), so
	// that all eight race from the same moment. Without it the first
	// process started could claim every task before the others had
	// opened their pools (seen once in a fresh clone's CI).
	gate, err := queue.DBOf(q).Conn(ctx)
	require.NoError(t, err)
	defer gate.Close()
	_, err = gate.ExecContext(ctx, "SELECT pg_advisory_lock($1)", pgRaceStartLock)
	require.NoError(t, err)
	cmds := make([]*exec.Cmd, pgRaceClaimers)
	outs := make([]*strings.Builder, pgRaceClaimers)
	for i := range cmds {
		cmd := exec.CommandContext(runCtx, os.Args[0], "-test.run=^TestPostgresClaimRace$", "-test.count=1")
		cmd.Env = append(os.Environ(), pgRaceWorkerEnv+"="+fmt.Sprintf("claimer-%d", i), pgRaceURLEnv+"="+url)
		outs[i] = &strings.Builder{}
		cmd.Stdout, cmd.Stderr = outs[i], outs[i]
		require.NoError(t, cmd.Start())
		cmds[i] = cmd
	}
	for waiting := 0; waiting < pgRaceClaimers; {
		require.NoError(t, runCtx.Err(), "%d of %d claimers at the start line", waiting, pgRaceClaimers)
		require.NoError(t, gate.QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_locks
		    WHERE locktype = 'advisory' AND objid = $1 AND NOT granted`, pgRaceStartLock).Scan(&waiting))
	}
	_, err = gate.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", pgRaceStartLock)
	require.NoError(t, err)
	for i, cmd := range cmds {
		require.NoError(t, cmd.Wait(), "claimer %d:\n%s", i, outs[i].String())
	}

	events, err := q.EventsAfter(ctx, 0, model.ListLimitMax)
	require.NoError(t, err)
	tasks, err := q.List(ctx, model.ListFilter{Limit: model.ListLimitMax})
	require.NoError(t, err)
	userOf := map[string]string{}
	for _, task := range tasks {
		userOf[task.ID] = task.User
		require.Equal(t, model.Completed, task.State, "task %s", task.ID)
		require.EqualValues(t, 1, task.Version, "task %s was claimed once", task.ID)
	}
	require.Len(t, tasks, 2*pgRaceTasks)

	open := map[string]map[string]bool{} // user -> tasks claimed and not yet completed
	peak := map[string]int{}
	claimers := map[string]bool{}
	claims := 0
	for _, e := range events {
		user := userOf[e.TaskID]
		if open[user] == nil {
			open[user] = map[string]bool{}
		}
		switch e.Kind {
		case model.EventClaimed:
			require.False(t, open[user][e.TaskID], "task %s claimed twice", e.TaskID)
			open[user][e.TaskID] = true
			peak[user] = max(peak[user], len(open[user]))
			claimers[e.Actor] = true
			claims++
		case model.EventCompleted:
			require.True(t, open[user][e.TaskID], "task %s completed unclaimed", e.TaskID)
			delete(open[user], e.TaskID)
		}
	}
	require.Equal(t, 2*pgRaceTasks, claims)
	require.Equal(t, 1, peak["solo"], "solo never ran two tasks at once")
	require.Greater(t, peak["many"], 1, "the unlimited user ran tasks side by side, so the claimers overlapped")
	names := make([]string, 0, len(claimers))
	for c := range claimers {
		names = append(names, c)
	}
	sort.Strings(names)
	t.Logf("claims by %d claimers %v; peak running: solo %d, many %d", len(names), names, peak["solo"], peak["many"])
	require.Greater(t, len(names), 1, "more than one claimer won claims")
	require.NoError(t, q.CheckCounters(ctx))
}

// pgRaceClaimer is one claimer process: claim a batch, complete it, until
// no task is left queued or running. A claimer finding nothing polls again
// at once (solo's next task is claimable as soon as its running one is
// completed by another process) and reads the depths every
// pgRaceDepthEvery polls. A claimer still finding tasks left when
// pgRaceClaimerTimeout has passed reports how many and fails.
func pgRaceClaimer(t *testing.T, worker, url string) {
	ctx, cancel := context.WithTimeout(context.Background(), pgRaceClaimerTimeout)
	defer cancel()
	clock := clockwork.NewFakeClockAt(conformanceEpoch)
	q, err := queue.Open(ctx, queue.Options{Path: url, Clock: clock, IDs: model.NewSeededIDs(1), MaxConns: 2})
	require.NoError(t, err)
	defer q.Close()
	// The start line (see TestPostgresClaimRace).
	_, err = queue.DBOf(q).ExecContext(ctx, "SELECT pg_advisory_lock_shared($1), pg_advisory_unlock_shared($1)", pgRaceStartLock)
	require.NoError(t, err)
	left := int64(-1)
	for idle := 0; ctx.Err() == nil; {
		claimed, err := q.Claim(ctx, model.ClaimRequest{Worker: worker, Max: 3, Lease: pgRaceLease})
		if ctx.Err() != nil {
			break
		}
		require.NoError(t, err)
		for _, c := range claimed {
			require.NoError(t, q.Complete(context.Background(), c.Claim))
		}
		if len(claimed) > 0 {
			idle = 0
			continue
		}
		if idle++; idle%pgRaceDepthEvery != 0 {
			continue
		}
		m, err := q.Metrics(ctx)
		if ctx.Err() != nil {
			break
		}
		require.NoError(t, err)
		if left = m.Depth[model.Queued] + m.Depth[model.Running]; left == 0 {
			return
		}
	}
	t.Fatalf("%s: %d tasks left after %v", worker, left, pgRaceClaimerTimeout)
}

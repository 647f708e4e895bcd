package cli

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/randomid"
)

// runbookBlocks reads docs/RUNBOOK.md and returns its commands by block
// name ("# runbook:NAME" as a code block's first line).
func runbookBlocks(t *testing.T) map[string][]string {
	t.Helper()
	body, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "docs", "RUNBOOK.md"))
	require.NoError(t, err)
	blocks := map[string][]string{}
	var name string
	inBlock := false
	for _, line := range strings.Split(string(body), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "```"):
			inBlock, name = !inBlock, ""
		case inBlock && strings.HasPrefix(trimmed, "# runbook:"):
			name = strings.TrimPrefix(trimmed, "# runbook:")
			require.NotContains(t, blocks, name, "runbook block %s defined twice", name)
			blocks[name] = nil
		case inBlock && name != "" && trimmed != "" && !strings.HasPrefix(trimmed, "#"):
			blocks[name] = append(blocks[name], trimmed)
		}
	}
	return blocks
}

// shellWords splits a command line the way a shell would for these simple
// commands: whitespace separates words, double quotes group.
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	quoted, inWord := false, false
	for _, r := range line {
		switch {
		case r == '"':
			quoted, inWord = !quoted, true
		case (r == ' ' || r == '\t') && !quoted:
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// runbook runs one block of RUNBOOK.md with the variables substituted and
// returns each command's output; every command must exit with want.
func runbook(t *testing.T, blocks map[string][]string, name string, vars map[string]string, want int) []string {
	t.Helper()
	lines, ok := blocks[name]
	require.True(t, ok, "RUNBOOK.md has no block %q", name)
	require.NotEmpty(t, lines, "RUNBOOK.md block %q has no commands", name)
	var outs []string
	for _, line := range lines {
		words := shellWords(line)
		require.Equal(t, "leasehold", words[0], "runbook %s: %q is not a leasehold command", name, line)
		args := words[1:]
		for i, w := range args {
			for k, v := range vars {
				w = strings.ReplaceAll(w, "$"+k, v)
			}
			require.NotContains(t, w, "$", "runbook %s: %q has an unset variable", name, line)
			args[i] = w
		}
		var stdout, stderr bytes.Buffer
		code := run(&env{ctx: context.Background(), stdout: &stdout, stderr: &stderr}, args)
		require.Equal(t, want, code, "runbook %s: %s\nstdout: %s\nstderr: %s", name, line, stdout.String(), stderr.String())
		outs = append(outs, stdout.String())
	}
	return outs
}

// situation is a database put into one state the runbook covers. The
// queue's clock starts ten minutes ago, so short leases taken through it have expired
// by the time the commands (on the real clock) run.
type situation struct {
	t     *testing.T
	db    string
	q     *queue.Queue
	clock *clockwork.FakeClock
	vars  map[string]string
}

func newSituation(t *testing.T) *situation {
	dir := t.TempDir()
	db := filepath.Join(dir, "leasehold.db")
	clock := clockwork.NewFakeClockAt(time.Now().Add(-10 * time.Minute).UTC().Truncate(time.Millisecond))
	q, err := queue.Open(context.Background(), queue.Options{Path: db, Clock: clock, IDs: randomid.Source{}})
	require.NoError(t, err)
	t.Cleanup(func() { q.Close() })
	return &situation{t: t, db: db, q: q, clock: clock, vars: map[string]string{"DB": db, "ACTOR": "ops-oncall"}}
}

const runbookPayload = `{"steps":[{"cost":1},{"cost":2,"effect":"charge"},{"cost":1}]}`

func (s *situation) submit(user, key string) string {
	res, err := s.q.Submit(context.Background(), model.SubmitRequest{User: user, Key: key, Payload: runbookPayload, CostBudget: 10, StepsMax: 5})
	require.NoError(s.t, err)
	s.vars["TASK"], s.vars["USER"], s.vars["KEY"], s.vars["PAYLOAD"] = res.TaskID, user, key, runbookPayload
	return res.TaskID
}

func (s *situation) claim(lease time.Duration) model.Claim {
	cs, err := s.q.Claim(context.Background(), model.ClaimRequest{Worker: "w1", Max: 1, Lease: lease})
	require.NoError(s.t, err)
	require.Len(s.t, cs, 1)
	return cs[0].Claim
}

// now returns a queue on the real present, to check outcomes.
func (s *situation) now() *queue.Queue {
	q, err := queue.Open(context.Background(), queue.Options{Path: s.db, Clock: clockwork.NewFakeClockAt(time.Now().Add(time.Second)), IDs: randomid.Source{}})
	require.NoError(s.t, err)
	s.t.Cleanup(func() { q.Close() })
	return q
}

func (s *situation) task(id string) model.Task {
	task, err := s.now().Task(context.Background(), id)
	require.NoError(s.t, err)
	return task
}

func TestRunbookPendingTooLong(t *testing.T) {
	blocks := runbookBlocks(t)
	ctx := context.Background()
	s := newSituation(t)
	require.NoError(t, s.q.SetUserLimit(ctx, model.UserLimit{User: "lena", RunningMax: 1, DepthMax: model.Inherit}, "setup"))
	s.submit("lena", "a")
	s.claim(time.Hour) // lena's first task runs (lease still current)
	waiting := s.submit("lena", "b")
	runbook(t, blocks, "pending-see", s.vars, exitOK)
	cs, err := s.now().Claim(ctx, model.ClaimRequest{Worker: "w2", Max: 1, Lease: time.Minute})
	require.NoError(t, err)
	require.Empty(t, cs, "lena is at her limit: her second task is not claimable yet")
	runbook(t, blocks, "pending-raise-user-limit", s.vars, exitOK)
	cs, err = s.now().Claim(ctx, model.ClaimRequest{Worker: "w2", Max: 1, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, cs, 1)
	require.Equal(t, waiting, cs[0].Claim.TaskID)
}

func TestRunbookQueueFull(t *testing.T) {
	blocks := runbookBlocks(t)
	ctx := context.Background()
	s := newSituation(t)
	limits, _, err := s.q.Limits(ctx)
	require.NoError(t, err)
	limits.DepthMax = 1
	require.NoError(t, s.q.SetLimits(ctx, limits, "setup"))
	s.submit("ana", "a")
	_, err = s.q.Submit(ctx, model.SubmitRequest{User: "bo", Key: "b", Payload: runbookPayload, CostBudget: 10, StepsMax: 5})
	require.ErrorIs(t, err, model.ErrQueueFull)
	runbook(t, blocks, "queue-full-raise-cap", s.vars, exitOK)
	_, err = s.now().Submit(ctx, model.SubmitRequest{User: "bo", Key: "b", Payload: runbookPayload, CostBudget: 10, StepsMax: 5})
	require.NoError(t, err)
}

func TestRunbookStuckRunningTask(t *testing.T) {
	blocks := runbookBlocks(t)
	s := newSituation(t)
	id := s.submit("ana", "stuck")
	s.claim(time.Second) // its worker died: the lease ran out ten minutes ago
	runbook(t, blocks, "stuck-see", s.vars, exitOK)
	runbook(t, blocks, "stuck-reap", s.vars, exitOK)
	task := s.task(id)
	require.Equal(t, model.Queued, task.State)
	require.Equal(t, 1, task.AttemptsCharged)

	s2 := newSituation(t)
	id2 := s2.submit("ana", "slow")
	s2.claim(time.Hour) // alive but slow
	runbook(t, blocks, "stuck-cancel", s2.vars, exitOK)
	slow := s2.task(id2)
	require.Equal(t, model.Running, slow.State)
	require.True(t, slow.CancelRequested)
	require.Equal(t, "ops-oncall", slow.CancelledBy)
}

func TestRunbookFailedTask(t *testing.T) {
	blocks := runbookBlocks(t)
	ctx := context.Background()
	s := newSituation(t)
	id := s.submit("ana", "doomed")
	c := s.claim(time.Hour)
	_, err := s.q.Fail(ctx, c, model.Failure{Class: model.Permanent, Message: "bad input upstream"})
	require.NoError(t, err)
	outs := runbook(t, blocks, "failed-see", s.vars, exitOK)
	require.Contains(t, outs[0], `"reason":"permanent_error"`)
	outs = runbook(t, blocks, "failed-resubmit", s.vars, exitOK)
	newID := strings.TrimSpace(outs[0])
	require.NotEqual(t, id, newID)
	require.Equal(t, model.Queued, s.task(newID).State)
	require.Equal(t, model.Failed, s.task(id).State, "the failed task never changes")
}

// uncertain parks a task whose step-1 effect has an intent but no receipt.
func uncertain(t *testing.T) (*situation, string) {
	ctx := context.Background()
	s := newSituation(t)
	id := s.submit("fay", "charge")
	c := s.claim(time.Hour)
	_, err := s.q.CompleteStep(ctx, model.StepWrite{Claim: c, Index: 0, Cost: 1})
	require.NoError(t, err)
	intent, err := s.q.RecordIntent(ctx, c, 1)
	require.NoError(t, err)
	_, err = s.q.Fail(ctx, c, model.Failure{Class: model.Uncertain, OpID: intent.OpID, Message: "response lost"})
	require.NoError(t, err)
	s.vars["OP"] = intent.OpID
	return s, id
}

func TestRunbookUncertainEffect(t *testing.T) {
	blocks := runbookBlocks(t)
	ctx := context.Background()

	s, id := uncertain(t)
	outs := runbook(t, blocks, "uncertain-see", s.vars, exitOK)
	require.Contains(t, outs[0], s.vars["OP"], "inspect names the operation without a receipt")
	runbook(t, blocks, "uncertain-applied", s.vars, exitOK)
	require.Equal(t, model.Queued, s.task(id).State)
	q := s.now()
	cs, err := q.Claim(ctx, model.ClaimRequest{Worker: "w2", Max: 1, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, cs, 1)
	require.Equal(t, 1, cs[0].Task.StepsUsed, "it resumes at the effect's step")
	intent, err := q.RecordIntent(ctx, cs[0].Claim, 1)
	require.NoError(t, err)
	require.Equal(t, model.IntentReceipted, intent.Status, "an applied effect is never called again")

	s, id = uncertain(t)
	runbook(t, blocks, "uncertain-not-applied", s.vars, exitOK)
	q = s.now()
	cs, err = q.Claim(ctx, model.ClaimRequest{Worker: "w2", Max: 1, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, cs, 1)
	intent, err = q.RecordIntent(ctx, cs[0].Claim, 1)
	require.NoError(t, err)
	require.Equal(t, model.IntentRecorded, intent.Status, "an effect not applied is made once more")
	require.Equal(t, id, cs[0].Claim.TaskID)

	s, id = uncertain(t)
	runbook(t, blocks, "uncertain-give-up", s.vars, exitOK)
	task := s.task(id)
	require.Equal(t, model.Failed, task.State)
	require.Equal(t, model.OperatorResolved, task.Reason)
}

func TestRunbookDeadLetter(t *testing.T) {
	blocks := runbookBlocks(t)
	ctx := context.Background()
	deadLetter := func() (*situation, string) {
		s := newSituation(t)
		limits, _, err := s.q.Limits(ctx)
		require.NoError(t, err)
		limits.AttemptsMax = 1
		require.NoError(t, s.q.SetLimits(ctx, limits, "setup"))
		id := s.submit("gus", "flaky")
		c := s.claim(time.Hour)
		_, err = s.q.Fail(ctx, c, model.Failure{Class: model.Transient, Message: "dependency down"})
		require.NoError(t, err)
		require.Equal(t, model.AttemptsExhausted, s.task(id).Reason)
		return s, id
	}
	s, id := deadLetter()
	runbook(t, blocks, "dead-letter-see", s.vars, exitOK)
	before := s.task(id)
	runbook(t, blocks, "dead-letter-requeue", s.vars, exitOK)
	after := s.task(id)
	require.Equal(t, model.Queued, after.State)
	require.Equal(t, 0, after.AttemptsCharged)
	require.Equal(t, before.CostBudget, after.CostBudget, "no budget granted")

	s, id = deadLetter()
	runbook(t, blocks, "dead-letter-give-up", s.vars, exitOK)
	require.Equal(t, model.Failed, s.task(id).State)
}

func TestRunbookStorageUnavailable(t *testing.T) {
	blocks := runbookBlocks(t)
	s := newSituation(t)
	s.submit("ana", "before")
	s.vars["KEY"] = "during-outage"
	require.NoError(t, s.q.Close())

	db, err := sql.Open("sqlite", s.db)
	require.NoError(t, err)
	defer db.Close()
	conn, err := db.Conn(context.Background())
	require.NoError(t, err)
	_, err = conn.ExecContext(context.Background(), "BEGIN EXCLUSIVE")
	require.NoError(t, err)
	var stdout, stderr bytes.Buffer
	code := run(&env{ctx: context.Background(), stdout: &stdout, stderr: &stderr},
		[]string{"submit", "--db", s.db, "--busy-timeout", "50ms", "--user", "ana", "--key", "during-outage",
			"--payload", runbookPayload, "--cost-budget", "10", "--steps-max", "5"})
	require.Equal(t, exitFail, code, "a submit during the outage fails clearly: %s", stdout.String())
	require.Contains(t, stderr.String(), "locked")
	_, err = conn.ExecContext(context.Background(), "COMMIT")
	require.NoError(t, err)
	require.NoError(t, conn.Close())

	outs := runbook(t, blocks, "storage-check", s.vars, exitOK)
	require.Contains(t, outs[1], `"replay":false`, "the failed submit stored nothing; the retry stores it once")
}

func TestRunbookCrashLoop(t *testing.T) {
	blocks := runbookBlocks(t)
	ctx := context.Background()
	s := newSituation(t)
	id := s.submit("hal", "poison")
	for i := 0; i < 2; i++ { // each claim's worker dies; the reaper requeues it
		s.claim(time.Second)
		s.clock.Advance(2 * time.Second)
		_, err := s.q.Reap(ctx)
		require.NoError(t, err)
		s.clock.Advance(5 * time.Second) // past the backoff
	}
	s.claim(time.Second) // and the third claim's worker dies too
	outs := runbook(t, blocks, "crash-loop-see", s.vars, exitOK)
	require.Equal(t, 2, strings.Count(outs[1], "lease_expired"))
	runbook(t, blocks, "crash-loop-cancel", s.vars, exitOK)
	task := s.task(id)
	require.Equal(t, model.Cancelled, task.State, "the reaper cancels instead of requeueing")
	require.Equal(t, "ops-oncall", task.CancelledBy)
}

func TestRunbookScheduleDidNotFire(t *testing.T) {
	blocks := runbookBlocks(t)
	ctx := context.Background()
	s := newSituation(t)
	_, err := s.q.AddSchedule(ctx, model.ScheduleSpec{User: "cron", Payload: runbookPayload, CostBudget: 10, StepsMax: 5,
		Origin: s.clock.Now(), Period: time.Minute}, "setup")
	require.NoError(t, err)
	runbook(t, blocks, "schedule-see", s.vars, exitOK)
	runbook(t, blocks, "schedule-run", s.vars, exitOK)
	runbook(t, blocks, "schedule-run", s.vars, exitOK) // twice: no run is enqueued twice
	runs, err := s.now().List(ctx, model.ListFilter{User: "cron"})
	require.NoError(t, err)
	require.Len(t, runs, 1, "the missed runs collapse into the latest one, enqueued once")
	require.GreaterOrEqual(t, runs[0].ScheduleRun, int64(5))
}

// TestRunbookSnapshotRestoreUpgrade runs the snapshot, restore and upgrade
// procedures against a copy of the previous schema's database.
func TestRunbookSnapshotRestoreUpgrade(t *testing.T) {
	blocks := runbookBlocks(t)
	ctx := context.Background()
	dir := t.TempDir()
	t.Setenv("LEASEHOLD_DATA_DIR", dir)
	db := filepath.Join(dir, "prod.db")
	fixture, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "queue", "testdata", "schema-v2.db"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(db, fixture, 0o644))
	vars := map[string]string{"DB": db, "ACTOR": "ops-oncall", "SNAPSHOT": filepath.Join(dir, "prod-snap.db"),
		"RESTORED": filepath.Join(dir, "restored.db")}

	// Upgrade the previous schema's database.
	before := sha256File(t, db)
	outs := runbook(t, blocks, "upgrade", vars, exitOK)
	require.Contains(t, outs[0], "dry run: nothing changed")
	require.Contains(t, outs[1], "verified snapshot")
	require.Contains(t, outs[2], "migrated", "the migration is in the audit trail")
	require.NotEqual(t, before, sha256File(t, db))
	snaps, err := filepath.Glob(filepath.Join(dir, "snapshots", "*.db"))
	require.NoError(t, err)
	require.Len(t, snaps, 1, "the migration snapshotted first")

	// Snapshot the upgraded database, then restore it to a new file.
	runbook(t, blocks, "snapshot", vars, exitOK)
	outs = runbook(t, blocks, "restore", vars, exitOK)
	require.Contains(t, outs[3], `"kind":"restored"`)
	live, err := queue.Open(ctx, queue.Options{Path: db, Clock: clockwork.NewFakeClockAt(time.Now()), IDs: randomid.Source{}})
	require.NoError(t, err)
	defer live.Close()
	restored, err := queue.Open(ctx, queue.Options{Path: vars["RESTORED"], Clock: clockwork.NewFakeClockAt(time.Now()), IDs: randomid.Source{}})
	require.NoError(t, err)
	defer restored.Close()
	want, err := live.List(ctx, model.ListFilter{Limit: model.ListLimitMax})
	require.NoError(t, err)
	got, err := restored.List(ctx, model.ListFilter{Limit: model.ListLimitMax})
	require.NoError(t, err)
	require.Len(t, got, len(want))
	for i := range want {
		require.Equal(t, want[i].ID, got[i].ID)
		require.Equal(t, want[i].StepsUsed, got[i].StepsUsed)
	}
	// Restoring again is refused: it would write over a database.
	var stdout, stderr bytes.Buffer
	code := run(&env{ctx: ctx, stdout: &stdout, stderr: &stderr}, []string{"restore", vars["SNAPSHOT"], "--to", vars["RESTORED"]})
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr.String(), "restore never writes over a database")
}

// TestRunbookBlocksAllRun fails when RUNBOOK.md gains a block no test runs.
func TestRunbookBlocksAllRun(t *testing.T) {
	tested := []string{"pending-see", "pending-raise-user-limit", "queue-full-raise-cap", "stuck-see", "stuck-reap",
		"stuck-cancel", "failed-see", "failed-resubmit", "uncertain-see", "uncertain-applied", "uncertain-not-applied",
		"uncertain-give-up", "dead-letter-see", "dead-letter-requeue", "dead-letter-give-up", "storage-check",
		"crash-loop-see", "crash-loop-cancel", "schedule-see", "schedule-run", "snapshot", "restore", "upgrade",
		"retention-see", "retention-prune", "retention-policy"}
	blocks := runbookBlocks(t)
	for name := range blocks {
		require.Contains(t, tested, name, "RUNBOOK.md block %s is run by no test", name)
	}
	require.Len(t, blocks, len(tested))
}

package cli

// The binary's contract, run in-process through run: bad usage or input
// exits 2 with one line naming the flag or field, prints nothing on stdout
// and leaves the database as it was (or not there at all); a failed
// operation exits 1 with one line; the success paths print what DESIGN.md
// promises. Tasks are driven into waiting_for_approval and needs_review
// through package queue on the same file, then handled with the CLI.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/view"
	"github.com/leasehold/leasehold/internal/testkit"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/randomid"
	"github.com/leasehold/leasehold/wire"
)

// cliTimeout bounds one in-process command: a command that should have
// refused its input but runs (a worker) stops here instead of hanging.
const cliTimeout = 20 * time.Second

// onePayload is a one-step synthetic payload.
const onePayload = `{"steps":[{"cost":1}]}`

// result is what one command did.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout: %q\nstderr: %q", r.code, r.stdout, r.stderr)
}

// lh runs the binary in-process with args.
func lh(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	var out, errOut bytes.Buffer
	code := run(&env{ctx: ctx, stdout: &out, stderr: &errOut}, args)
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// requireOneLine checks that r printed nothing on stdout and exactly one
// line on stderr containing every one of want.
func requireOneLine(t *testing.T, r result, want ...string) {
	t.Helper()
	require.Empty(t, r.stdout, "nothing on stdout: %s", r)
	require.True(t, strings.HasSuffix(r.stderr, "\n") && strings.Count(r.stderr, "\n") == 1,
		"exactly one line on stderr: %s", r)
	for _, w := range want {
		require.Contains(t, r.stderr, w, "the error names %q: %s", w, r)
	}
}

// requireUsage checks exit 2 with one line naming want.
func requireUsage(t *testing.T, r result, want ...string) {
	t.Helper()
	require.Equal(t, exitUsage, r.code, "bad input exits 2: %s", r)
	requireOneLine(t, r, want...)
}

// requireFailed checks exit 1 with one line naming want.
func requireFailed(t *testing.T, r result, want ...string) {
	t.Helper()
	require.Equal(t, exitFail, r.code, "a failed operation exits 1: %s", r)
	requireOneLine(t, r, want...)
}

// requireOK checks exit 0 with nothing on stderr.
func requireOK(t *testing.T, r result) {
	t.Helper()
	require.Equal(t, exitOK, r.code, "success exits 0: %s", r)
	require.Empty(t, r.stderr, "nothing on stderr: %s", r)
}

// snapshot returns every file in dir with the SHA-256 of its contents.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	out := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		sum := sha256.Sum256(b)
		out[e.Name()] = hex.EncodeToString(sum[:])
	}
	return withoutReaderFiles(out)
}

// emptySHA256 is the SHA-256 of no bytes.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// withoutReaderFiles drops from a snapshot or tree what a read-only
// reader of a WAL database leaves beside it: the -shm index and an empty
// -wal. Neither holds a transaction: a write would have changed the main
// file or left frames in the -wal.
func withoutReaderFiles(files map[string]string) map[string]string {
	for name, sum := range files {
		if strings.HasSuffix(name, "-shm") || strings.HasSuffix(name, "-wal") && sum == emptySHA256 {
			delete(files, name)
		}
	}
	return files
}

// fixture is one test's database file, in a directory of its own.
type fixture struct {
	t   *testing.T
	dir string
	db  string
}

// newFixture returns a fixture with a new, empty database, made as a Go
// program makes one (queue.Open); migrate is the command line's way, and
// its tests make theirs with it.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := newMissing(t)
	makeDB(t, f.db)
	return f
}

// makeDB makes a new, empty database at path as a Go program does
// (queue.Open); migrate is the command line's way.
func makeDB(t *testing.T, path string) {
	t.Helper()
	q, err := queue.Open(context.Background(), queue.Options{Path: path, Clock: clockwork.NewRealClock(), IDs: randomid.Source{}})
	require.NoError(t, err)
	require.NoError(t, q.Close())
}

// newMissing returns a fixture whose database does not exist yet.
func newMissing(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	return &fixture{t: t, dir: dir, db: filepath.Join(dir, "leasehold.db")}
}

// lh runs words (a command and its subcommand) against the fixture's
// database, then args.
func (f *fixture) lh(words []string, args ...string) result {
	f.t.Helper()
	all := append(append(append([]string(nil), words...), "--db", f.db), args...)
	return lh(f.t, all...)
}

// do runs command name against the database with args.
func (f *fixture) do(name string, args ...string) result {
	f.t.Helper()
	return f.lh([]string{name}, args...)
}

// submit submits a task through the CLI and returns its ID.
func (f *fixture) submit(user, key, payload string, extra ...string) string {
	f.t.Helper()
	r := f.do("submit", append([]string{"--user", user, "--key", key, "--payload", payload,
		"--cost-budget", "10", "--steps-max", "5"}, extra...)...)
	requireOK(f.t, r)
	id := strings.TrimSpace(r.stdout)
	require.Regexp(f.t, `^t_[0-9a-f]+$`, id)
	return id
}

// statusJSON returns status --json decoded.
func (f *fixture) statusJSON(id string) map[string]any {
	f.t.Helper()
	r := f.do("status", id, "--json")
	requireOK(f.t, r)
	var rec map[string]any
	require.NoError(f.t, json.Unmarshal([]byte(r.stdout), &rec), r.stdout)
	return rec
}

// withQueue opens the fixture's database through package queue on a fake
// clock at the wall clock's now, runs fn, and closes it.
func (f *fixture) withQueue(fn func(ctx context.Context, q *queue.Queue)) {
	f.t.Helper()
	ctx := context.Background()
	q, err := queue.Open(ctx, queue.Options{Path: f.db, Clock: clockwork.NewFakeClockAt(time.Now()), IDs: randomid.Source{}})
	require.NoError(f.t, err)
	defer func() { require.NoError(f.t, q.Close()) }()
	fn(ctx, q)
}

// claim claims the one queued task id (the test's others are elsewhere or
// lower in priority) for worker w1.
func (f *fixture) claim(ctx context.Context, q *queue.Queue, id string) model.Claim {
	f.t.Helper()
	claimed, err := q.Claim(ctx, model.ClaimRequest{Worker: "w1", Max: 1, Lease: 30 * time.Second})
	require.NoError(f.t, err)
	require.Len(f.t, claimed, 1)
	require.Equal(f.t, id, claimed[0].Claim.TaskID, "the test's task is the one claimed")
	return claimed[0].Claim
}

// toApproval submits a task whose first step is a gate and drives it to
// waiting_for_approval; it returns the task ID and the recorded version.
func (f *fixture) toApproval(key string) (string, int64) {
	f.t.Helper()
	id := f.submit("ana", key, `{"steps":[{"approval":"manager"},{"cost":1}]}`, "--priority", "100")
	var version int64
	f.withQueue(func(ctx context.Context, q *queue.Queue) {
		c := f.claim(ctx, q, id)
		to, err := q.Pause(ctx, c, 0, "manager")
		require.NoError(f.t, err)
		require.Equal(f.t, model.WaitingForApproval, to)
		task, err := q.Task(ctx, id)
		require.NoError(f.t, err)
		version = task.ApprovalVersion
	})
	require.Positive(f.t, version)
	return id, version
}

// toReview submits a task whose first step makes an effect and drives it
// to needs_review with that effect's intent recorded and no receipt (an
// uncertain effect); it returns the task ID and the operation ID.
func (f *fixture) toReview(key string) (string, string) {
	f.t.Helper()
	id := f.submit("ana", key, `{"steps":[{"cost":1,"effect":"charge"}]}`, "--priority", "100")
	var op string
	f.withQueue(func(ctx context.Context, q *queue.Queue) {
		c := f.claim(ctx, q, id)
		intent, err := q.RecordIntent(ctx, c, 0)
		require.NoError(f.t, err)
		op = intent.OpID
		to, err := q.Fail(ctx, c, model.Failure{Class: model.Uncertain, OpID: op, Message: "lost response"})
		require.NoError(f.t, err)
		require.Equal(f.t, model.NeedsReview, to)
	})
	require.Equal(f.t, model.OperationID(id, 0), op)
	return id, op
}

// toCompleted submits a one-step task and completes it.
func (f *fixture) toCompleted(key string) string {
	f.t.Helper()
	id := f.submit("ana", key, onePayload, "--priority", "100")
	f.withQueue(func(ctx context.Context, q *queue.Queue) {
		c := f.claim(ctx, q, id)
		_, err := q.CompleteStep(ctx, model.StepWrite{Claim: c, Index: 0, Cost: 1})
		require.NoError(f.t, err)
		require.NoError(f.t, q.Complete(ctx, c))
	})
	return id
}

// badCase is one bad usage or input.
type badCase struct {
	name  string
	words []string // the command (and subcommand)
	args  []string // after --db PATH; TASK stands for a task that exists
	want  []string // what the one line must name
	noDB  bool     // the command takes no --db
}

// badInputs lists, for every subcommand that takes input, an unknown flag,
// missing flags and arguments, and malformed values.
func badInputs() []badCase {
	// sub returns valid submit flags with each flag of pairs (flag, value)
	// set to value, added, or dropped where value is "<drop>".
	sub := func(pairs ...string) []string {
		args := []string{"--user", "ana", "--key", "k-bad", "--payload", onePayload, "--cost-budget", "10", "--steps-max", "5"}
		for i := 0; i < len(pairs); i += 2 {
			j := slices.Index(args, pairs[i])
			switch {
			case j < 0:
				args = append(args, pairs[i], pairs[i+1])
			case pairs[i+1] == "<drop>":
				args = slices.Delete(args, j, j+2)
			default:
				args[j+1] = pairs[i+1]
			}
		}
		return args
	}
	w := func(words ...string) []string { return words }
	sched := func(extra ...string) []string {
		args := []string{"--user", "ana", "--payload", onePayload, "--cost-budget", "5", "--steps-max", "2",
			"--origin", "2030-01-01T00:00:00Z", "--period", "1h", "--actor", "ops"}
		return append(args, extra...)
	}
	workerArgs := func(extra ...string) []string { return append([]string{"--id", "w1"}, extra...) }
	longKey := strings.Repeat("k", model.KeyLengthMax+1)
	return []badCase{
		// submit
		{"submit unknown flag", w("submit"), sub("--bogus", "1"), []string{"bogus"}, false},
		{"submit missing user", w("submit"), sub("--user", "<drop>"), []string{"user"}, false},
		{"submit missing key", w("submit"), sub("--key", "<drop>"), []string{"key"}, false},
		{"submit missing payload", w("submit"), sub("--payload", "<drop>"), []string{"payload"}, false},
		{"submit missing cost budget", w("submit"), sub("--cost-budget", "<drop>"), []string{"cost_budget"}, false},
		{"submit missing steps max", w("submit"), sub("--steps-max", "<drop>"), []string{"steps_max"}, false},
		{"submit bad user", w("submit"), sub("--user", "a b"), []string{"user"}, false},
		{"submit key too long", w("submit"), sub("--key", longKey), []string{"key"}, false},
		{"submit reserved key", w("submit"), sub("--key", "schedule/s1/0"), []string{"key"}, false},
		{"submit payload not JSON", w("submit"), sub("--payload", `{"steps":`), []string{"payload"}, false},
		{"submit payload not an object", w("submit"), sub("--payload", `[1,2]`), []string{"payload"}, false},
		{"submit payload unknown field", w("submit"), sub("--payload", `{"foo":1}`), []string{"payload.foo: unknown field"}, false},
		{"submit payload steps not an array", w("submit"), sub("--payload", `{"steps":"x"}`), []string{"payload.steps: must be an array"}, false},
		{"submit payload negative cost", w("submit"), sub("--payload", `{"steps":[{"cost":-1}]}`), []string{"payload.steps[0].cost: must be an integer"}, false},
		{"submit payload fail kind", w("submit"), sub("--payload", `{"steps":[{"cost":1},{"cost":1},{"fail":"sometimes"}]}`),
			[]string{`payload.steps[2].fail: must be "transient" or "permanent"`}, false},
		{"submit payload missing file", w("submit"), sub("--payload", "@/nonexistent/payload.json"), []string{"--payload"}, false},
		{"submit payload bare at", w("submit"), sub("--payload", "@"), []string{"--payload"}, false},
		{"submit negative cost budget", w("submit"), sub("--cost-budget", "-1"), []string{"cost_budget"}, false},
		{"submit zero cost budget", w("submit"), sub("--cost-budget", "0"), []string{"cost_budget"}, false},
		{"submit cost budget too large", w("submit"), sub("--cost-budget", strconv.Itoa(model.CostBudgetMax+1)), []string{"cost_budget"}, false},
		{"submit cost budget not a number", w("submit"), sub("--cost-budget", "ten"), []string{"cost-budget"}, false},
		{"submit zero steps", w("submit"), sub("--steps-max", "0"), []string{"steps_max"}, false},
		{"submit too many steps", w("submit"), sub("--steps-max", strconv.Itoa(model.StepsMaxLimit+1)), []string{"steps_max"}, false},
		{"submit priority too high", w("submit"), sub("--priority", "101"), []string{"priority"}, false},
		{"submit priority too low", w("submit"), sub("--priority", "-101"), []string{"priority"}, false},
		{"submit run-at not a time", w("submit"), sub("--run-at", "tomorrow"), []string{"--run-at"}, false},
		{"submit run-at negative duration", w("submit"), sub("--run-at", "+-5s"), []string{"--run-at"}, false},
		{"submit run-at out of range", w("submit"), sub("--run-at", "1999-12-31T00:00:00Z"), []string{"run_at"}, false},
		{"submit deadline not a time", w("submit"), sub("--deadline", "2030-13-01"), []string{"--deadline"}, false},
		{"submit deadline before run-at", w("submit"), sub("--run-at", "2030-01-02T00:00:00Z", "--deadline", "2030-01-01T00:00:00Z"), []string{"deadline"}, false},
		{"submit deadline passed", w("submit"), sub("--deadline", "2001-01-01T00:00:00Z"), []string{"deadline"}, false},
		{"submit unexpected argument", w("submit"), append(sub(), "extra"), []string{"extra"}, false},
		{"submit bad synchronous", w("submit"), sub("--synchronous", "OFF"), []string{"synchronous"}, false},
		{"submit bad busy timeout", w("submit"), sub("--busy-timeout", "-1s"), []string{"--busy-timeout"}, false},
		{"submit empty db path", w("submit"), sub("--db", ""), []string{"--db"}, false},
		// status
		{"status unknown flag", w("status"), []string{"TASK", "--bogus"}, []string{"bogus"}, false},
		{"status missing task", w("status"), nil, []string{"argument"}, false},
		{"status two tasks", w("status"), []string{"TASK", "TASK"}, []string{"argument"}, false},
		{"status bad task ID", w("status"), []string{"nope"}, []string{"task", "nope"}, false},
		{"status task ID with a dot", w("status"), []string{"t_X.Z"}, []string{"task", "t_X.Z"}, false},
		{"status bad json value", w("status"), []string{"TASK", "--json=maybe"}, []string{"json"}, false},
		{"status flag-like task after --", w("status"), []string{"--", "-x"}, []string{"task", `"-x"`}, false},
		{"status flag after -- is an argument", w("status"), []string{"--", "TASK", "--json"}, []string{"argument"}, false},
		// list
		{"list unknown flag", w("list"), []string{"--bogus"}, []string{"bogus"}, false},
		{"list bad state", w("list"), []string{"--state", "sleeping"}, []string{"--state", "sleeping"}, false},
		{"list negative limit", w("list"), []string{"--limit", "-1"}, []string{"limit"}, false},
		{"list limit too large", w("list"), []string{"--limit", strconv.Itoa(model.ListLimitMax + 1)}, []string{"limit"}, false},
		{"list bad user", w("list"), []string{"--user", "a b"}, []string{"user"}, false},
		{"list unexpected argument", w("list"), []string{"extra"}, []string{"extra"}, false},
		// cancel
		{"cancel unknown flag", w("cancel"), []string{"TASK", "--bogus"}, []string{"bogus"}, false},
		{"cancel missing task", w("cancel"), nil, []string{"argument"}, false},
		{"cancel bad task ID", w("cancel"), []string{"t_"}, []string{"task"}, false},
		{"cancel bad actor", w("cancel"), []string{"TASK", "--actor", "a b"}, []string{"actor"}, false},
		{"cancel empty actor", w("cancel"), []string{"TASK", "--actor", ""}, []string{"actor"}, false},
		// approve
		{"approve unknown flag", w("approve"), []string{"TASK", "--version", "1", "--bogus"}, []string{"bogus"}, false},
		{"approve missing task", w("approve"), []string{"--version", "1"}, []string{"argument"}, false},
		{"approve missing version", w("approve"), []string{"TASK"}, []string{"--version"}, false},
		{"approve negative version", w("approve"), []string{"TASK", "--version", "-3"}, []string{"--version"}, false},
		{"approve version not a number", w("approve"), []string{"TASK", "--version", "v1"}, []string{"version"}, false},
		{"approve bad task ID", w("approve"), []string{"task-1", "--version", "1"}, []string{"task"}, false},
		{"approve bad actor", w("approve"), []string{"TASK", "--version", "1", "--actor", "a/b"}, []string{"actor"}, false},
		// reject
		{"reject unknown flag", w("reject"), []string{"TASK", "--version", "1", "--bogus"}, []string{"bogus"}, false},
		{"reject missing task", w("reject"), []string{"--version", "1"}, []string{"argument"}, false},
		{"reject missing version", w("reject"), []string{"TASK"}, []string{"--version: required"}, false},
		{"reject negative version", w("reject"), []string{"TASK", "--version", "-3"}, []string{"--version"}, false},
		{"reject version not a number", w("reject"), []string{"TASK", "--version", "v1"}, []string{"version"}, false},
		{"reject bad task ID", w("reject"), []string{"T_00", "--version", "1"}, []string{"task"}, false},
		{"reject bad actor", w("reject"), []string{"TASK", "--version", "1", "--actor", "a b"}, []string{"actor"}, false},
		// requeue
		{"requeue unknown flag", w("requeue"), []string{"TASK", "--grant-cost", "1", "--grant-steps", "1", "--bogus"}, []string{"bogus"}, false},
		{"requeue missing task", w("requeue"), []string{"--grant-cost", "1", "--grant-steps", "1"}, []string{"argument"}, false},
		{"requeue missing grant cost", w("requeue"), []string{"TASK", "--grant-steps", "1"}, []string{"--grant-cost"}, false},
		{"requeue missing grant steps", w("requeue"), []string{"TASK", "--grant-cost", "1"}, []string{"--grant-steps"}, false},
		{"requeue negative grant cost", w("requeue"), []string{"TASK", "--grant-cost", "-1", "--grant-steps", "1"}, []string{"--grant-cost"}, false},
		{"requeue grant steps not a number", w("requeue"), []string{"TASK", "--grant-cost", "1", "--grant-steps", "many"}, []string{"grant-steps"}, false},
		{"requeue bad task ID", w("requeue"), []string{"xyz", "--grant-cost", "1", "--grant-steps", "1"}, []string{"task"}, false},
		{"requeue bad actor", w("requeue"), []string{"TASK", "--grant-cost", "1", "--grant-steps", "1", "--actor", "a b"}, []string{"actor"}, false},
		// resolve
		{"resolve unknown flag", w("resolve"), []string{"TASK", "--as", "failed", "--bogus"}, []string{"bogus"}, false},
		{"resolve missing task", w("resolve"), []string{"--as", "failed"}, []string{"argument"}, false},
		{"resolve missing as", w("resolve"), []string{"TASK"}, []string{"--as"}, false},
		{"resolve as not terminal", w("resolve"), []string{"TASK", "--as", "running"}, []string{"--as", "running"}, false},
		{"resolve as unknown state", w("resolve"), []string{"TASK", "--as", "done"}, []string{"--as", "done"}, false},
		{"resolve bad task ID", w("resolve"), []string{"t_1.g", "--as", "failed"}, []string{"task"}, false},
		{"resolve bad actor", w("resolve"), []string{"TASK", "--as", "failed", "--actor", "a b"}, []string{"actor"}, false},
		// settle
		{"settle unknown flag", w("settle"), []string{"TASK.s0", "--applied", "--bogus"}, []string{"bogus"}, false},
		{"settle missing operation", w("settle"), []string{"--applied"}, []string{"argument"}, false},
		{"settle neither", w("settle"), []string{"TASK.s0"}, []string{"--applied", "--not-applied"}, false},
		{"settle both", w("settle"), []string{"TASK.s0", "--applied", "--not-applied"}, []string{"--applied", "--not-applied"}, false},
		{"settle bad operation", w("settle"), []string{"nope", "--applied"}, []string{"operation", "nope"}, false},
		{"settle operation of a bad task ID", w("settle"), []string{"t_z_z.s1", "--applied"}, []string{"operation", "t_z_z.s1"}, false},
		{"settle bad actor", w("settle"), []string{"TASK.s0", "--applied", "--actor", "a b"}, []string{"actor"}, false},
		{"settle step not a number", w("settle"), []string{"TASK.sXYZ", "--applied", "--actor", "ops"}, []string{"operation", ".sXYZ"}, false},
		{"settle negative step", w("settle"), []string{"TASK.s-1", "--applied", "--actor", "ops"}, []string{"operation", ".s-1"}, false},
		{"settle step with a leading zero", w("settle"), []string{"TASK.s01", "--applied", "--actor", "ops"}, []string{"operation", ".s01"}, false},
		{"settle missing step", w("settle"), []string{"TASK.s", "--applied", "--actor", "ops"}, []string{"operation"}, false},
		// inspect, events, metrics
		{"inspect unknown flag", w("inspect"), []string{"--bogus"}, []string{"bogus"}, false},
		{"inspect unexpected argument", w("inspect"), []string{"TASK"}, []string{"unexpected argument"}, false},
		{"events unknown flag", w("events"), []string{"TASK", "--bogus"}, []string{"bogus"}, false},
		{"events missing task", w("events"), nil, []string{"argument"}, false},
		{"events bad task ID", w("events"), []string{"t_!"}, []string{"task"}, false},
		{"metrics unknown flag", w("metrics"), []string{"--bogus"}, []string{"bogus"}, false},
		{"metrics unexpected argument", w("metrics"), []string{"extra"}, []string{"extra"}, false},
		// limits
		{"limits unknown flag", w("limits"), []string{"--bogus"}, []string{"bogus"}, false},
		{"limits negative running max", w("limits"), []string{"--running-max", "-5", "--actor", "ops"}, []string{"user_running_max"}, false},
		{"limits negative depth max", w("limits"), []string{"--depth-max", "-3", "--actor", "ops"}, []string{"depth_max"}, false},
		{"limits zero attempts", w("limits"), []string{"--attempts-max", "0", "--actor", "ops"}, []string{"attempts_max"}, false},
		{"limits negative grant cost max", w("limits"), []string{"--grant-cost-max", "-1", "--actor", "ops"}, []string{"grant_cost_max"}, false},
		{"limits grant steps max too large", w("limits"), []string{"--grant-steps-max", strconv.Itoa(model.StepsMaxLimit + 1), "--actor", "ops"}, []string{"grant_steps_max"}, false},
		{"limits claim batch too large", w("limits"), []string{"--claim-batch-max", strconv.Itoa(model.ClaimBatchLimit + 1), "--actor", "ops"}, []string{"claim_batch_max"}, false},
		{"limits running max not a number", w("limits"), []string{"--running-max", "lots"}, []string{"running-max"}, false},
		{"limits bad user", w("limits"), []string{"--user", "a b", "--running-max", "1", "--actor", "ops"}, []string{"user"}, false},
		{"limits user with a global limit", w("limits"), []string{"--user", "ana", "--attempts-max", "3", "--actor", "ops"}, []string{"--user"}, false},
		{"limits user running max out of range", w("limits"), []string{"--user", "ana", "--running-max", "-7", "--actor", "ops"}, []string{"running_max"}, false},
		{"limits bad actor", w("limits"), []string{"--depth-max", "5", "--actor", "a b"}, []string{"actor"}, false},
		{"limits bad user to show", w("limits"), []string{"--user", "a b"}, []string{"user"}, false},
		{"limits unexpected argument", w("limits"), []string{"extra"}, []string{"extra"}, false},
		// schedule
		{"schedule without subcommand", w("schedule"), nil, []string{"add", "list", "remove"}, true},
		{"schedule unknown subcommand", w("schedule", "frob"), nil, []string{"frob"}, false},
		{"schedule add unknown flag", w("schedule", "add"), sched("--bogus"), []string{"bogus"}, false},
		{"schedule add missing user", w("schedule", "add"), sched("--user", ""), []string{"user"}, false},
		{"schedule add missing payload", w("schedule", "add"), sched("--payload", ""), []string{"payload"}, false},
		{"schedule add bad payload", w("schedule", "add"), sched("--payload", "{"), []string{"payload"}, false},
		{"schedule add payload missing file", w("schedule", "add"), sched("--payload", "@/nonexistent/p.json"), []string{"--payload"}, false},
		{"schedule add zero cost budget", w("schedule", "add"), sched("--cost-budget", "0"), []string{"cost_budget"}, false},
		{"schedule add missing origin", w("schedule", "add"), sched("--origin", ""), []string{"origin"}, false},
		{"schedule add bad origin", w("schedule", "add"), sched("--origin", "noon"), []string{"--origin"}, false},
		{"schedule add zero period", w("schedule", "add"), sched("--period", "0s"), []string{"period"}, false},
		{"schedule add period too short", w("schedule", "add"), sched("--period", "500ms"), []string{"period"}, false},
		{"schedule add period not a duration", w("schedule", "add"), sched("--period", "hourly"), []string{"period"}, false},
		{"schedule add bad actor", w("schedule", "add"), sched("--actor", "a b"), []string{"actor"}, false},
		{"schedule add unexpected argument", w("schedule", "add"), sched("extra"), []string{"extra"}, false},
		{"schedule list unknown flag", w("schedule", "list"), []string{"--bogus"}, []string{"bogus"}, false},
		{"schedule list unexpected argument", w("schedule", "list"), []string{"extra"}, []string{"extra"}, false},
		{"schedule remove unknown flag", w("schedule", "remove"), []string{"s_1", "--bogus"}, []string{"bogus"}, false},
		{"schedule remove missing schedule", w("schedule", "remove"), nil, []string{"argument"}, false},
		{"schedule remove bad actor", w("schedule", "remove"), []string{"s_1", "--actor", "a b"}, []string{"actor"}, false},
		{"schedule remove bad schedule ID", w("schedule", "remove"), []string{"bad id!", "--actor", "ops"}, []string{"schedule", `"bad id!"`}, false},
		{"schedule remove empty schedule ID", w("schedule", "remove"), []string{"", "--actor", "ops"}, []string{"schedule", "required"}, false},
		{"schedule run unknown flag", w("schedule", "run"), []string{"--bogus"}, []string{"bogus"}, false},
		{"schedule run unexpected argument", w("schedule", "run"), []string{"extra"}, []string{"extra"}, false},
		{"reap unknown flag", w("reap"), []string{"--bogus"}, []string{"bogus"}, false},
		// prune (prune_test.go tests the command itself)
		{"prune unknown flag", w("prune"), []string{"--older-than", "30d", "--bogus"}, []string{"bogus"}, false},
		{"prune missing age", w("prune"), nil, []string{"--older-than", "required"}, false},
		{"prune zero age", w("prune"), []string{"--older-than", "0d"}, []string{"--older-than", "positive"}, false},
		{"prune negative age", w("prune"), []string{"--older-than", "-36h"}, []string{"--older-than", "negative"}, false},
		{"prune bad age", w("prune"), []string{"--older-than", "30days"}, []string{"--older-than", "30days"}, false},
		{"prune age too long", w("prune"), []string{"--older-than", "4000d"}, []string{"--older-than", "3650d"}, false},
		{"prune zero key window", w("prune"), []string{"--older-than", "30d", "--keep-keys", "0s"}, []string{"--keep-keys", "positive"}, false},
		{"prune bad key window", w("prune"), []string{"--older-than", "30d", "--keep-keys", "x"}, []string{"--keep-keys"}, false},
		{"prune batch too big", w("prune"), []string{"--older-than", "30d", "--batch", "501"}, []string{"--batch", "500"}, false},
		{"prune zero batch", w("prune"), []string{"--older-than", "30d", "--batch", "0"}, []string{"--batch"}, false},
		{"prune unexpected argument", w("prune"), []string{"--older-than", "30d", "extra"}, []string{"extra"}, false},
		{"prune policy unknown flag", w("prune", "policy"), []string{"--bogus"}, []string{"bogus"}, false},
		{"prune policy negative age", w("prune", "policy"), []string{"--older-than", "-1d"}, []string{"--older-than", "negative"}, false},
		{"prune policy zero key window", w("prune", "policy"), []string{"--keep-keys", "0d"}, []string{"--keep-keys", "positive"}, false},
		{"reap unexpected argument", w("reap"), []string{"extra"}, []string{"extra"}, false},
		// worker (every flag is checked before any file is opened)
		{"worker unknown flag", w("worker"), workerArgs("--bogus"), []string{"bogus"}, false},
		{"worker missing id", w("worker"), nil, []string{"id"}, false},
		{"worker bad id", w("worker"), []string{"--id", "w 1"}, []string{"id"}, false},
		{"worker zero concurrency", w("worker"), workerArgs("--concurrency", "0"), []string{"concurrency"}, false},
		{"worker negative concurrency", w("worker"), workerArgs("--concurrency", "-2"), []string{"concurrency"}, false},
		{"worker concurrency too high", w("worker"), workerArgs("--concurrency", "65"), []string{"concurrency"}, false},
		{"worker zero lease", w("worker"), workerArgs("--lease", "0"), []string{"lease", "positive"}, false},
		{"worker negative shutdown grace", w("worker"), workerArgs("--shutdown-grace", "-1s"), []string{"--shutdown-grace"}, false},
		{"worker shutdown grace too long", w("worker"), workerArgs("--shutdown-grace", "2h"), []string{"--shutdown-grace"}, false},
		{"worker lease too short", w("worker"), workerArgs("--lease", "50ms"), []string{"lease"}, false},
		{"worker lease too long", w("worker"), workerArgs("--lease", "2h"), []string{"lease"}, false},
		{"worker lease not whole milliseconds", w("worker"), workerArgs("--lease", "1500us"), []string{"lease"}, false},
		{"worker heartbeat not well under the lease", w("worker"), workerArgs("--lease", "30s", "--heartbeat", "16s"), []string{"heartbeat"}, false},
		{"worker heartbeat longer than the lease", w("worker"), workerArgs("--lease", "2s", "--heartbeat", "3s"), []string{"heartbeat"}, false},
		{"worker negative heartbeat", w("worker"), workerArgs("--heartbeat", "-1s"), []string{"heartbeat"}, false},
		{"worker negative cost capacity", w("worker"), workerArgs("--cost-capacity", "-1"), []string{"cost_capacity"}, false},
		{"worker unknown service kind", w("worker"), workerArgs("--service-kind", "magic"), []string{"--service-kind", "magic"}, false},
		{"worker lease not a duration", w("worker"), workerArgs("--lease", "long"), []string{"lease"}, false},
		{"worker unexpected argument", w("worker"), workerArgs("extra"), []string{"extra"}, false},
		// sim
		{"sim unknown flag", w("sim"), []string{"--bogus"}, []string{"bogus"}, true},
		{"sim unknown scenario", w("sim"), []string{"--scenario", "nosuch"}, []string{"--scenario", "nosuch"}, true},
		{"sim zero seeds", w("sim"), []string{"--seeds", "0"}, []string{"--seeds"}, true},
		{"sim negative seeds", w("sim"), []string{"--seeds", "-5"}, []string{"--seeds"}, true},
		{"sim too many seeds", w("sim"), []string{"--seeds", "10000001"}, []string{"--seeds"}, true},
		{"sim negative seed", w("sim"), []string{"--seed", "-1"}, []string{"seed"}, true},
		{"sim parallel too high", w("sim"), []string{"--parallel", "257"}, []string{"--parallel"}, true},
		{"sim bad events", w("sim"), []string{"--events", "1,x"}, []string{"--events"}, true},
		{"sim events with a sweep", w("sim"), []string{"--events", "1,2", "--seeds", "2"}, []string{"--events"}, true},
		{"sim trace with a sweep", w("sim"), []string{"--trace", "--seeds", "2"}, []string{"--trace"}, true},
		{"sim report outside the allowed directory", w("sim"), []string{"--report", "/etc/leasehold-report"}, []string{"--report", "outside"}, true},
		{"sim unexpected argument", w("sim"), []string{"extra"}, []string{"extra"}, true},
		{"sim seed range past the last seed", w("sim"), []string{"--seed", "18446744073709551615", "--seeds", "5"}, []string{"--seeds", "18446744073709551615"}, true},
		{"sim seed past the last", w("sim"), []string{"--seed", "18446744073709551616"}, []string{"seed"}, true},
		{"sim event index past the schedule", w("sim"), []string{"--events", "99999"}, []string{"--events", "99999", "past the end"}, true},
		{"sim event indices not increasing", w("sim"), []string{"--events", "3,1"}, []string{"--events", "increase"}, true},
		{"sim negative parallel", w("sim"), []string{"--parallel", "-1"}, []string{"--parallel"}, true},
		{"sim all with events", w("sim"), []string{"--scenario", "all", "--events", "1"}, []string{"--scenario all", "--events"}, true},
		{"sim all with a report", w("sim"), []string{"--scenario", "all", "--report", "r"}, []string{"--scenario all", "--report"}, true},
		{"sim bad coverage value", w("sim"), []string{"--coverage=maybe"}, []string{"coverage"}, true},
		{"sim timeline into a missing directory", w("sim"), []string{"--timeline", "/nonexistent/dir/t.json"}, []string{"--timeline", "does not exist"}, true},
		{"sim timeline onto a directory", w("sim"), []string{"--timeline", "/"}, []string{"--timeline", "directory"}, true},
		// audit
		{"audit unknown flag", w("audit"), []string{"--bogus"}, []string{"bogus"}, false},
		{"audit bad task ID", w("audit"), []string{"--task", "nope"}, []string{"task", "nope"}, false},
		{"audit bad actor", w("audit"), []string{"--actor", "a b"}, []string{"actor"}, false},
		{"audit bad format", w("audit"), []string{"--format", "xml"}, []string{"--format", "xml"}, false},
		{"audit zero limit", w("audit"), []string{"--limit", "0"}, []string{"--limit"}, false},
		{"audit since not a time", w("audit"), []string{"--since", "yesterday"}, []string{"--since"}, false},
		{"audit until before since", w("audit"), []string{"--since", "2030-01-02T00:00:00Z", "--until", "2030-01-01T00:00:00Z"}, []string{"--until"}, false},
		{"audit bad busy timeout", w("audit"), []string{"--busy-timeout", "2h"}, []string{"--busy-timeout"}, false},
		{"audit unexpected argument", w("audit"), []string{"extra"}, []string{"extra"}, false},
		// serve (every check before the database is opened or a port taken)
		{"serve unknown flag", w("serve"), []string{"--bogus"}, []string{"bogus"}, false},
		{"serve bad address", w("serve"), []string{"--addr", "localhost", "--tokens", "/nonexistent/tokens"}, []string{"--addr"}, false},
		{"serve missing tokens file", w("serve"), []string{"--addr", "127.0.0.1:0", "--tokens", "/nonexistent/tokens"}, []string{"--tokens"}, false},
		{"serve unexpected argument", w("serve"), []string{"extra"}, []string{"extra"}, false},
		// snapshot, restore, migrate (paths are checked against the allowed
		// directory, the working directory here: the fixture lies outside it)
		{"snapshot without subcommand", w("snapshot"), nil, []string{"create or verify"}, true},
		{"snapshot unknown subcommand", w("snapshot", "copy"), nil, []string{"copy"}, false},
		{"snapshot create unknown flag", w("snapshot", "create"), []string{"--out", "s.db", "--bogus"}, []string{"bogus"}, false},
		{"snapshot create busy timeout (not offered)", w("snapshot", "create"), []string{"--out", "s.db", "--busy-timeout", "1s"}, []string{"busy-timeout"}, false},
		{"snapshot create database outside", w("snapshot", "create"), []string{"--out", "s.db"}, []string{"--db", "outside"}, false},
		{"snapshot create unexpected argument", w("snapshot", "create"), []string{"--out", "s.db", "extra"}, []string{"extra"}, false},
		{"snapshot verify unknown flag", w("snapshot", "verify"), []string{"s.db", "--bogus"}, []string{"bogus"}, true},
		{"snapshot verify missing file", w("snapshot", "verify"), nil, []string{"argument"}, true},
		{"snapshot verify outside", w("snapshot", "verify"), []string{"/etc/leasehold-snapshot.db"}, []string{"SNAPSHOT: ", "outside"}, true},
		{"restore unknown flag", w("restore"), []string{"s.db", "--to", "r.db", "--bogus"}, []string{"bogus"}, true},
		{"restore missing snapshot", w("restore"), []string{"--to", "r.db"}, []string{"argument"}, true},
		{"restore from outside", w("restore"), []string{"/etc/leasehold-snapshot.db", "--to", "r.db"}, []string{"SNAPSHOT: ", "outside"}, true},
		{"restore to outside", w("restore"), []string{"s.db", "--to", "/etc/leasehold-restored.db"}, []string{"--to", "outside"}, true},
		{"restore bad actor", w("restore"), []string{"s.db", "--to", "r.db", "--actor", "a b"}, []string{"actor"}, true},
		{"migrate unknown flag", w("migrate"), []string{"--bogus"}, []string{"bogus"}, false},
		{"migrate bad busy timeout", w("migrate"), []string{"--busy-timeout", "-1s", "--actor", "ops"}, []string{"--busy-timeout"}, false},
		{"migrate bad synchronous", w("migrate"), []string{"--synchronous", "OFF", "--actor", "ops"}, []string{"--synchronous", "OFF"}, false},
		{"migrate database outside", w("migrate"), []string{"--actor", "ops"}, []string{"--db", "outside"}, false},
		{"migrate unexpected argument", w("migrate"), []string{"extra"}, []string{"extra"}, false},
		// evidence (checked before any sweep runs or file is written)
		{"evidence unknown flag", w("evidence"), []string{"--bogus"}, []string{"bogus"}, true},
		{"evidence zero seeds", w("evidence"), []string{"--seeds", "0"}, []string{"--seeds"}, true},
		{"evidence too many seeds", w("evidence"), []string{"--seeds", "100001"}, []string{"--seeds"}, true},
		{"evidence unexpected argument", w("evidence"), []string{"extra"}, []string{"extra"}, true},
		// version, demo, and the command itself
		{"version unknown flag", w("version"), []string{"--bogus"}, []string{"bogus"}, true},
		{"version unexpected argument", w("version"), []string{"extra"}, []string{"extra"}, true},
		{"demo unknown flag", w("demo"), []string{"--bogus"}, []string{"bogus"}, true},
		{"chaos unknown flag", w("chaos"), []string{"--bogus"}, []string{"bogus"}, true},
		{"chaos negative kills", w("chaos"), []string{"--kills", "-1"}, []string{"--kills"}, true},
		{"demo unexpected argument", w("demo"), []string{"--dir", "DIR", "extra"}, []string{"extra"}, true},
		{"demo dir outside", w("demo"), []string{"--dir", "DIR"}, []string{"--dir", "outside"}, true},
		{"unknown command", w("frobnicate"), nil, []string{"frobnicate"}, true},
	}
}

// Every bad input exits 2 with one line naming what was wrong and nothing
// on stdout. Against an existing database it leaves every file as it was;
// against a path where none exists it creates nothing (no database, WAL,
// or service ledger).
func TestBadInputExitsTwoAndWritesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	task := f.submit("ana", "k1", onePayload)
	cases := badInputs()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := make([]string, len(c.args))
			for i, a := range c.args {
				a = strings.ReplaceAll(a, "TASK", task)
				args[i] = strings.ReplaceAll(a, "DIR", filepath.Join(t.TempDir(), "demo"))
			}
			if c.noDB {
				requireUsage(t, lh(t, append(append([]string(nil), c.words...), args...)...), c.want...)
				return
			}
			before := snapshot(t, f.dir)
			r := lh(t, append(append(append([]string(nil), c.words...), "--db", f.db), args...)...)
			requireUsage(t, r, c.want...)
			require.Equal(t, before, snapshot(t, f.dir), "bad input changed the database's files")

			// Where no database exists, nothing is created.
			empty := newMissing(t)
			r = empty.lh(c.words, args...)
			require.NotEqual(t, exitOK, r.code, "%s", r)
			require.Empty(t, snapshot(t, empty.dir), "bad input created files: %s", r)
		})
	}
}

// The commands that write refuse bad input with 2 where there is no
// database, naming the input (checked first), and create nothing.
func TestBadInputToACreatingCommandCreatesNoDatabase(t *testing.T) {
	t.Parallel()
	for _, c := range badInputs() {
		if c.noDB || (c.words[0] != "submit" && c.words[0] != "worker") {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			f := newMissing(t)
			args := make([]string, len(c.args))
			for i, a := range c.args {
				args[i] = strings.ReplaceAll(a, "TASK", "t_00")
			}
			r := f.lh(c.words, args...)
			requireUsage(t, r, c.want...)
			require.Empty(t, snapshot(t, f.dir), "a refused %s created files", c.words[0])
		})
	}
}

// Bad-input coverage: every registered command, and every subcommand of
// those that have them, appears in the table with an unknown flag (or,
// taking no flags of its own, with some bad input), so a new command
// without bad-input cases fails here.
func TestBadInputsCoverEveryCommand(t *testing.T) {
	subcommands := map[string][]string{
		"schedule": {"add", "list", "run", "remove"},
		"snapshot": {"create", "verify"},
	}
	unknownFlag, anyCase := map[string]bool{}, map[string]bool{}
	for _, c := range badInputs() {
		name := strings.Join(c.words, " ")
		anyCase[name], anyCase[c.words[0]] = true, true
		if strings.HasSuffix(c.name, "unknown flag") {
			unknownFlag[name] = true
		}
	}
	require.NotEmpty(t, commands)
	for name := range commands {
		require.True(t, anyCase[name], "%s has bad-input cases", name)
		subs, ok := subcommands[name]
		if !ok {
			require.True(t, unknownFlag[name], "%s has an unknown-flag case", name)
			continue
		}
		for _, sub := range subs {
			require.True(t, unknownFlag[name+" "+sub], "%s %s has an unknown-flag case", name, sub)
		}
	}
}

// Operations that fail on the queue's state exit 1 with one line.
func TestFailedOperationsExitOne(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	queued := f.submit("ana", "k-queued", onePayload)
	completed := f.toCompleted("k-completed")
	waiting, version := f.toApproval("k-waiting")
	unknown := "t_00000000deadbeef"

	checks := []struct {
		name string
		args []string
		want []string
	}{
		{"status of an unknown task", []string{"status", unknown}, []string{unknown, "not found"}},
		{"events of an unknown task", []string{"events", unknown}, []string{unknown, "not found"}},
		{"cancel of an unknown task", []string{"cancel", unknown}, []string{unknown, "not found"}},
		{"cancel of a completed task", []string{"cancel", completed, "--actor", "ops"}, []string{completed, "completed"}},
		{"approve with an outdated version", []string{"approve", waiting, "--version", strconv.FormatInt(version-1, 10), "--actor", "boss"}, []string{"version"}},
		{"approve with a later version", []string{"approve", waiting, "--version", strconv.FormatInt(version+1, 10), "--actor", "boss"}, []string{"version"}},
		{"approve of a queued task", []string{"approve", queued, "--version", "0", "--actor", "boss"}, []string{queued}},
		{"reject with an outdated version", []string{"reject", waiting, "--version", strconv.FormatInt(version-1, 10), "--actor", "boss"}, []string{"version"}},
		{"reject with a later version", []string{"reject", waiting, "--version", strconv.FormatInt(version+1, 10), "--actor", "boss"}, []string{"version"}},
		{"reject of a queued task", []string{"reject", queued, "--version", "0", "--actor", "boss"}, []string{queued}},
		{"resolve of a task not in needs_review", []string{"resolve", queued, "--as", "failed", "--actor", "ops"}, []string{queued, "queued"}},
		{"requeue of a task not in needs_review", []string{"requeue", waiting, "--grant-cost", "1", "--grant-steps", "1", "--actor", "ops"}, []string{waiting}},
		{"settle of an unknown operation", []string{"settle", unknown + ".s0", "--applied", "--actor", "ops"}, []string{unknown + ".s0", "not found"}},
		{"remove of an unknown schedule", []string{"schedule", "remove", "s_0000", "--actor", "ops"}, []string{"s_0000", "not found"}},
		{"a changed payload under a used key", []string{"submit", "--user", "ana", "--key", "k-queued", "--payload",
			`{"steps":[{"cost":2}]}`, "--cost-budget", "10", "--steps-max", "5"}, []string{"k-queued", "idempotency key"}},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			before := snapshot(t, f.dir)
			requireFailed(t, lh(t, append(c.args, "--db", f.db)...), c.want...)
			require.Equal(t, before, snapshot(t, f.dir), "a refused operation changed the database")
		})
	}
	// Nothing moved.
	require.Equal(t, "queued", f.statusJSON(queued)["state"])
	require.Equal(t, "completed", f.statusJSON(completed)["state"])
	w := f.statusJSON(waiting)
	require.Equal(t, "waiting_for_approval", w["state"])
	require.Empty(t, w["approved_by"])

	// A command that needs an existing database refuses a missing one with
	// 2 and does not create it.
	missing := newMissing(t)
	requireUsage(t, missing.do("status", queued), "no database at", "leasehold.db", "leasehold migrate")
	require.Empty(t, snapshot(t, missing.dir))
}

// A requeue grant above the configured maximum is bad input (the queue
// returns a ValidationError naming grant_cost or grant_steps): exit 2,
// nothing written, the task still in needs_review.
func TestRequeueGrantAboveMaximumIsBadInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id, _ := f.toReview("k-review")
	before := snapshot(t, f.dir)
	requireUsage(t, f.do("requeue", id, "--grant-cost", strconv.FormatInt(model.DefaultLimits.GrantCostMax+1, 10),
		"--grant-steps", "1", "--actor", "ops"), "grant_cost", strconv.FormatInt(model.DefaultLimits.GrantCostMax, 10))
	requireUsage(t, f.do("requeue", id, "--grant-cost", "1",
		"--grant-steps", strconv.Itoa(model.DefaultLimits.GrantStepsMax+1), "--actor", "ops"), "grant_steps")
	require.Equal(t, before, snapshot(t, f.dir))

	// The maximum is the configured one: lower it and a grant above it is
	// refused, one at it accepted.
	requireOK(t, f.do("limits", "--grant-cost-max", "20", "--actor", "ops"))
	requireUsage(t, f.do("requeue", id, "--grant-cost", "21", "--grant-steps", "0", "--actor", "ops"), "grant_cost", "20")
	rec := f.statusJSON(id)
	require.Equal(t, "needs_review", rec["state"])
	require.Equal(t, float64(10), rec["cost_budget"])
}

// A database written by a newer build is refused by every command that
// opens one, with exit 1 and a message naming both schema versions, and is
// left as it was.
func TestNewerSchemaIsRefusedByEveryCommand(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.submit("ana", "k1", onePayload)
	const future = 999
	db, err := sql.Open("sqlite", f.db+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO schema_migrations (version, name, checksum, applied_at) VALUES (?, 'future', 'x', 0)`, future)
	require.NoError(t, err)
	require.NoError(t, db.Close())

	ours := strconv.Itoa(queue.SchemaVersion())
	commands := [][]string{
		{"submit", "--user", "ana", "--key", "k2", "--payload", onePayload, "--cost-budget", "10", "--steps-max", "5"},
		{"status", id},
		{"list"},
		{"cancel", id, "--actor", "ops"},
		{"approve", id, "--version", "1", "--actor", "ops"},
		{"reject", id, "--version", "1", "--actor", "ops"},
		{"requeue", id, "--grant-cost", "0", "--grant-steps", "0", "--actor", "ops"},
		{"resolve", id, "--as", "failed", "--actor", "ops"},
		{"settle", id + ".s0", "--applied", "--actor", "ops"},
		{"inspect"},
		{"events", id},
		{"metrics"},
		{"limits"},
		{"limits", "--depth-max", "5", "--actor", "ops"},
		{"schedule", "add", "--user", "ana", "--payload", onePayload, "--cost-budget", "5", "--steps-max", "2",
			"--origin", "2030-01-01T00:00:00Z", "--period", "1h", "--actor", "ops"},
		{"schedule", "list"},
		{"schedule", "remove", "s_1", "--actor", "ops"},
		{"schedule", "run"},
		{"reap"},
		{"prune", "--older-than", "1d"},
		{"prune", "--older-than", "1d", "--dry-run"},
		{"prune", "policy"},
		{"worker", "--id", "w1"},
	}
	before := snapshot(t, f.dir)
	for _, args := range commands {
		name := args[0]
		if len(args) > 1 && !strings.HasPrefix(args[1], model.TaskIDPrefix) {
			name += " " + args[1]
		}
		t.Run(name, func(t *testing.T) {
			requireFailed(t, lh(t, append(args, "--db", f.db)...), strconv.Itoa(future), ours)
			require.Equal(t, before, snapshot(t, f.dir), "a refused command changed the files (or made a service ledger)")
		})
	}
}

// submit prints the task ID; with --json, {"task_id", "replay"}; an exact
// replay returns the same ID with replay true, and writes nothing.
func TestSubmitPrintsTheIDAndRecognisesAReplay(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	args := []string{"--user", "ana", "--key", "order-1", "--payload", `{"steps": [{"cost": 1}]}`, "--cost-budget", "10", "--steps-max", "5"}
	r := f.do("submit", args...)
	requireOK(t, r)
	require.Regexp(t, `^t_[0-9a-f]+\n$`, r.stdout)
	id := strings.TrimSpace(r.stdout)

	replay := func(extra ...string) map[string]any {
		t.Helper()
		r := f.do("submit", append(append([]string(nil), args...), extra...)...)
		requireOK(t, r)
		var out map[string]any
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
		require.Len(t, out, 2, "exactly task_id and replay: %s", r.stdout)
		return out
	}
	before := snapshot(t, f.dir)
	require.Equal(t, map[string]any{"task_id": id, "replay": true}, replay("--json"))
	// The canonical form decides: the same payload spelled differently is
	// the same request.
	args[5] = `{"steps":[{"cost":1}]}`
	require.Equal(t, map[string]any{"task_id": id, "replay": true}, replay("--json"))
	require.Equal(t, before, snapshot(t, f.dir), "a replay writes nothing")
	// Without --json the replay says so too.
	r = f.do("submit", args...)
	requireOK(t, r)
	require.Equal(t, id+" (replay: the task already existed)\n", r.stdout)

	args[3] = "order-2"
	fresh := replay("--json")
	require.Equal(t, false, fresh["replay"])
	require.NotEqual(t, id, fresh["task_id"])

	// A payload read from a file is the same request as the inline one.
	file := filepath.Join(t.TempDir(), "payload.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"steps":[{"cost":1}]}`), 0o600))
	args[5] = "@" + file
	require.Equal(t, map[string]any{"task_id": fresh["task_id"], "replay": true}, replay("--json"))
}

// rfc3339UTC matches a time printed as RFC 3339 in UTC.
var rfc3339UTC = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$`)

// status --json carries at least the fields DESIGN.md lists, snake_case,
// with times in RFC 3339 UTC.
func TestStatusJSONHasTheDesignFields(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// Times given with an offset come back in UTC.
	id := f.submit("ana", "k1", onePayload, "--run-at", "2031-06-01T14:00:00+02:00", "--deadline", "2031-06-02T00:00:00.250Z",
		"--priority", "7")
	rec := f.statusJSON(id)
	for _, field := range []string{"id", "user", "state", "reason", "version", "attempt", "cost_used", "cost_budget",
		"steps_used", "steps_max", "cancel_requested", "cancelled_by", "approved_by", "run_at", "deadline",
		"created_at", "updated_at"} {
		require.Contains(t, rec, field)
	}
	for field := range rec {
		require.Regexp(t, `^[a-z]+(_[a-z]+)*$`, field, "snake_case field names")
	}
	require.Equal(t, id, rec["id"])
	require.Equal(t, "ana", rec["user"])
	require.Equal(t, "queued", rec["state"])
	require.Equal(t, "", rec["reason"])
	require.Equal(t, float64(0), rec["version"])
	require.Equal(t, float64(0), rec["attempt"])
	require.Equal(t, float64(0), rec["attempts_failed"])
	require.Equal(t, float64(0), rec["cost_used"])
	require.Equal(t, float64(10), rec["cost_budget"])
	require.Equal(t, float64(0), rec["steps_used"])
	require.Equal(t, float64(5), rec["steps_max"])
	require.Equal(t, float64(7), rec["priority"])
	require.Equal(t, false, rec["cancel_requested"])
	require.Equal(t, "", rec["cancelled_by"])
	require.Equal(t, "", rec["approved_by"])
	require.Equal(t, "2031-06-01T12:00:00Z", rec["run_at"])
	require.Equal(t, "2031-06-02T00:00:00.25Z", rec["deadline"])
	for _, field := range []string{"created_at", "updated_at"} {
		s, _ := rec[field].(string)
		require.Regexp(t, rfc3339UTC, s, field)
		at, err := time.Parse(time.RFC3339Nano, s)
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), at, time.Minute, field)
	}

	// Without --json the record is printed for people.
	r := f.do("status", id)
	requireOK(t, r)
	require.Contains(t, r.stdout, "task "+id)
	require.Contains(t, r.stdout, "state     queued")
}

// list --json prints every task as a status record, filtered by --state.
func TestListJSON(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a := f.submit("ana", "k1", onePayload)
	b := f.submit("bo", "k1", onePayload)
	requireOK(t, f.do("cancel", b, "--actor", "ops"))

	list := func(args ...string) []map[string]any {
		t.Helper()
		r := f.do("list", append(args, "--json")...)
		requireOK(t, r)
		var out struct {
			Tasks []map[string]any `json:"tasks"`
			Next  string           `json:"next"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
		return out.Tasks
	}
	ids := func(recs []map[string]any) []string {
		var out []string
		for _, r := range recs {
			out = append(out, r["id"].(string))
		}
		sort.Strings(out)
		return out
	}
	all := list()
	want := []string{a, b}
	sort.Strings(want)
	require.Equal(t, want, ids(all))
	for _, rec := range all {
		require.Contains(t, rec, "state")
		require.Contains(t, rec, "cost_budget")
	}
	require.Equal(t, []string{a}, ids(list("--state", "queued")))
	require.Equal(t, []string{b}, ids(list("--state", "cancelled")))
	require.Equal(t, []string{b}, ids(list("--user", "bo")))
	require.Empty(t, list("--state", "running"))
	require.Len(t, list("--limit", "1"), 1)
}

// cancel --actor records who cancelled: a queued task is cancelled at once;
// a running one gets cancel_requested and keeps running until its worker
// sees it.
func TestCancelRecordsTheActor(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.submit("ana", "k1", onePayload)
	r := f.do("cancel", id, "--actor", "alice")
	requireOK(t, r)
	require.Equal(t, fmt.Sprintf("task %s: cancelled by alice\n", id), r.stdout)
	rec := f.statusJSON(id)
	require.Equal(t, "cancelled", rec["state"])
	require.Equal(t, "cancelled_by_caller", rec["reason"])
	require.Equal(t, "alice", rec["cancelled_by"])

	running := f.submit("ana", "k2", onePayload, "--priority", "100")
	f.withQueue(func(ctx context.Context, q *queue.Queue) { f.claim(ctx, q, running) })
	r = f.do("cancel", running, "--actor", "bob", "--json")
	requireOK(t, r)
	var out map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.Equal(t, "running", out["state"])
	require.Equal(t, true, out["cancel_requested"])
	require.Equal(t, "bob", out["cancelled_by"])
}

// approve naming the recorded version resumes the task and records the
// approver; reject naming it cancels a waiting task.
func TestApproveAndReject(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id, version := f.toApproval("k1")
	other, otherVersion := f.toApproval("k2")
	rec := f.statusJSON(id)
	require.Equal(t, "waiting_for_approval", rec["state"])
	require.Equal(t, float64(version), rec["approval_version"])
	requireOK(t, f.do("approve", id, "--version", strconv.FormatInt(version, 10), "--actor", "boss"))
	rec = f.statusJSON(id)
	require.Equal(t, "queued", rec["state"])
	require.Equal(t, "boss", rec["approved_by"])

	// A rejection naming another version exits 1 naming it and changes
	// nothing; the version status shows rejects.
	before := f.statusJSON(other)
	events := f.do("events", other, "--json")
	requireOK(t, events)
	r := f.do("reject", other, "--version", strconv.FormatInt(otherVersion+1, 10), "--actor", "boss")
	require.Equal(t, exitFail, r.code, "%s", r)
	require.Contains(t, r.stderr, "version")
	require.Equal(t, before, f.statusJSON(other))
	require.Equal(t, events.stdout, f.do("events", other, "--json").stdout, "a refused rejection records nothing")
	r = f.do("reject", other, "--version", strconv.FormatInt(otherVersion, 10), "--actor", "boss")
	requireOK(t, r)
	require.Equal(t, fmt.Sprintf("task %s rejected by boss at version %d\n", other, otherVersion), r.stdout)
	rec = f.statusJSON(other)
	require.Equal(t, "cancelled", rec["state"])
	require.Equal(t, "approval_rejected", rec["reason"])
	require.Equal(t, "boss", rec["cancelled_by"])

	// Without --version, reject is refused as approve is (the API
	// requires the version too): TestRejectNeedsTheVersionAsApproveDoes.
	g := newFixture(t)
	third, _ := g.toApproval("k3")
	requireUsage(t, g.do("reject", third, "--actor", "boss"), "--version: required")
	require.Equal(t, "waiting_for_approval", g.statusJSON(third)["state"])
}

// An uncertain effect parks its task in needs_review: inspect shows the
// operation without a receipt, settle records what the provider said,
// requeue grants a bounded budget and resolve settles another one.
func TestReviewSettleRequeueResolve(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id, op := f.toReview("k1")
	other, otherOp := f.toReview("k2")

	r := f.do("inspect", "--json")
	requireOK(t, r)
	var found []wire.Inspection
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &found), r.stdout)
	require.Len(t, found, 2)
	byID := map[string]wire.Inspection{}
	for _, in := range found {
		byID[in.Task.ID] = in
	}
	require.Equal(t, []string{op}, byID[id].Unreceipted)
	require.Equal(t, []string{otherOp}, byID[other].Unreceipted)
	require.Contains(t, byID[id].Advice, "settle")

	requireOK(t, f.do("settle", op, "--not-applied", "--actor", "ops"))
	requireOK(t, f.do("requeue", id, "--grant-cost", "5", "--grant-steps", "1", "--actor", "ops"))
	rec := f.statusJSON(id)
	require.Equal(t, "queued", rec["state"])
	require.Equal(t, float64(15), rec["cost_budget"])
	require.Equal(t, float64(6), rec["steps_max"])

	requireOK(t, f.do("resolve", other, "--as", "failed", "--actor", "ops"))
	rec = f.statusJSON(other)
	require.Equal(t, "failed", rec["state"])
	require.Equal(t, "operator_resolved", rec["reason"])
}

// limits shows the stored limits as snake_case JSON and sets them, overall
// and per user.
func TestLimitsSetAndShow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.submit("ana", "k1", onePayload)
	show := func(args ...string) map[string]any {
		t.Helper()
		r := f.do("limits", append(args, "--json")...)
		requireOK(t, r)
		var out map[string]any
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
		return out
	}
	limits := show()["limits"].(map[string]any)
	require.Equal(t, float64(model.DefaultLimits.DepthMax), limits["depth_max"])
	require.Equal(t, float64(model.DefaultLimits.AttemptsMax), limits["attempts_max"])
	require.Equal(t, float64(model.DefaultLimits.GrantCostMax), limits["grant_cost_max"])

	out := show("--depth-max", "50", "--attempts-max", "5", "--claim-batch-max", "4", "--actor", "ops")
	limits = out["limits"].(map[string]any)
	require.Equal(t, float64(50), limits["depth_max"])
	require.Equal(t, float64(5), limits["attempts_max"])
	require.Equal(t, float64(4), limits["claim_batch_max"])
	require.Equal(t, float64(model.DefaultLimits.UserDepthMax), limits["user_depth_max"], "unset limits keep their values")

	out = show("--user", "ana", "--running-max", "2", "--actor", "ops")
	require.Equal(t, []any{map[string]any{"user": "ana", "running_max": float64(2), "depth_max": float64(-1)}}, out["users"])
	require.Equal(t, float64(50), out["limits"].(map[string]any)["depth_max"], "a user's limit leaves the defaults alone")
	out = show("--user", "ana", "--depth-max", "3", "--actor", "ops")
	require.Equal(t, []any{map[string]any{"user": "ana", "running_max": float64(2), "depth_max": float64(3)}}, out["users"],
		"a user's limit not named keeps its value")
	require.Equal(t, float64(5), show()["limits"].(map[string]any)["attempts_max"])

	r := f.do("limits")
	requireOK(t, r)
	require.Contains(t, r.stdout, "depth_max=50 ")
	require.Contains(t, r.stdout, "user ana running_max=2 depth_max=3")
}

// schedule add prints the new schedule's ID, list shows it (snake_case,
// times RFC 3339 UTC) and remove deletes it.
func TestScheduleAddListRemove(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.submit("ana", "k1", onePayload)
	r := f.lh([]string{"schedule", "add"}, "--user", "ana", "--payload", onePayload, "--cost-budget", "5", "--steps-max", "2",
		"--origin", "2030-01-01T01:00:00+01:00", "--period", "90m", "--priority", "3", "--actor", "ops")
	requireOK(t, r)
	id := strings.TrimSpace(r.stdout)
	require.NotEmpty(t, id)
	require.Equal(t, id+"\n", r.stdout)

	r = f.lh([]string{"schedule", "list"})
	requireOK(t, r)
	require.Contains(t, r.stdout, id+" user=ana origin=2030-01-01T00:00:00Z period=1h30m0s")

	r = f.lh([]string{"schedule", "list"}, "--json")
	requireOK(t, r)
	var list []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list), r.stdout)
	require.Len(t, list, 1)
	s := list[0]
	for field := range s {
		require.Regexp(t, `^[a-z]+(_[a-z]+)*$`, field, "snake_case field names")
	}
	require.Equal(t, id, s["id"])
	require.Equal(t, "ana", s["user"])
	require.Equal(t, "2030-01-01T00:00:00Z", s["origin"])
	require.Equal(t, float64(90*60*1000), s["period_ms"])
	require.Equal(t, float64(5), s["cost_budget"])
	require.Equal(t, float64(2), s["steps_max"])
	require.Equal(t, float64(3), s["priority"])
	require.Regexp(t, rfc3339UTC, s["created_at"])

	r = f.lh([]string{"schedule", "remove"}, id, "--actor", "ops")
	requireOK(t, r)
	require.Equal(t, fmt.Sprintf("schedule %s removed\n", id), r.stdout)
	r = f.lh([]string{"schedule", "list"}, "--json")
	requireOK(t, r)
	require.Equal(t, "[]\n", r.stdout)
	requireFailed(t, f.lh([]string{"schedule", "remove"}, id, "--actor", "ops"), id, "not found")
}

// events --json prints the task's audit trail, snake_case, in order.
func TestEventsJSON(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.submit("ana", "k1", onePayload)
	requireOK(t, f.do("cancel", id, "--actor", "alice"))
	r := f.do("events", id, "--json")
	requireOK(t, r)
	var evs []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &evs), r.stdout)
	require.Len(t, evs, 2)
	require.Equal(t, "submitted", evs[0]["kind"])
	require.Equal(t, "queued", evs[0]["to"])
	require.Equal(t, "cancelled", evs[1]["kind"])
	require.Equal(t, "queued", evs[1]["from"])
	require.Equal(t, "cancelled", evs[1]["to"])
	require.Equal(t, "cancelled_by_caller", evs[1]["reason"])
	require.Equal(t, "alice", evs[1]["actor"])
	for _, e := range evs {
		require.Equal(t, id, e["task_id"])
		require.Regexp(t, rfc3339UTC, e["at"])
	}
	require.Less(t, evs[0]["seq"].(float64), evs[1]["seq"].(float64))
}

// metrics --json counts against the tasks submitted, and the depths by
// state add up to them.
func TestMetricsJSONReconciles(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.submit("ana", "k1", onePayload)
	f.submit("ana", "k2", onePayload)
	cancelled := f.submit("bo", "k1", onePayload)
	requireOK(t, f.do("cancel", cancelled, "--actor", "ops"))
	f.toCompleted("k3")

	r := f.do("metrics", "--json")
	requireOK(t, r)
	var m view.Metrics
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &m), r.stdout)
	require.Equal(t, int64(4), m.Submitted)
	var total int64
	for _, n := range m.Depth {
		total += n
	}
	require.Equal(t, m.Submitted, total)
	require.Equal(t, int64(2), m.Depth["queued"])
	require.Equal(t, int64(1), m.Depth["cancelled"])
	require.Equal(t, int64(1), m.Depth["completed"])
	require.Equal(t, int64(1), m.Completions)
	require.Equal(t, int64(1), m.Cancellations)
	require.Equal(t, int64(1), m.QueueWait.Count, "one claim, one queue-wait observation")

	r = f.do("metrics")
	requireOK(t, r)
	require.Contains(t, r.stdout, "submitted 4, completed 1")
}

// version prints the module and the schema version, as text and JSON.
func TestHelpPrintsEveryFlagAndExitsZero(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"submit", "--help"}, {"worker", "-h"}, {"schedule", "add", "--help"}, {"snapshot", "create", "--help"}} {
		r := lh(t, args...)
		requireOK(t, r)
		require.Contains(t, r.stdout, "usage: leasehold "+strings.Join(args[:len(args)-1], " ")+" [flags]", args)
		require.Contains(t, r.stdout, "-db path\n", args)
		require.Empty(t, r.stderr, args)
	}
	r := lh(t, "submit", "--help")
	require.Contains(t, r.stdout, "idempotency key")
	require.Contains(t, r.stdout, "submit a task")
	// Asking for help does nothing: no database is created.
	require.NoFileExists(t, "leasehold.db")
}

func TestVersion(t *testing.T) {
	t.Parallel()
	r := lh(t, "version")
	requireOK(t, r)
	require.Contains(t, r.stdout, "(module github.com/leasehold/leasehold)")
	require.Contains(t, r.stdout, fmt.Sprintf("schema version %d\n", queue.SchemaVersion()))

	r = lh(t, "version", "--json")
	requireOK(t, r)
	var v versionInfo
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v), r.stdout)
	require.Equal(t, "github.com/leasehold/leasehold", v.Module)
	require.Equal(t, queue.SchemaVersion(), v.Schema)
	require.Positive(t, v.Schema)
	require.NotEmpty(t, v.Go)
}

// Positional arguments stay positional: after "--" nothing is a flag, and
// an argument that looks like a flag is never parsed as one once it has
// been taken as an argument.
func TestParseWithArgsKeepsArgumentsPositional(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		args     []string
		n        int
		want     []string // fs.Args() after a successful parse
		json     bool
		actor    string
		errorHas string // "" for success
	}{
		{"argument before flags", []string{"a", "--json"}, 1, []string{"a"}, true, "", ""},
		{"argument after flags", []string{"--json", "--actor", "ops", "a"}, 1, []string{"a"}, true, "ops", ""},
		{"arguments between flags", []string{"--actor", "ops", "a", "--json", "b"}, 2, []string{"a", "b"}, true, "ops", ""},
		{"flag-like argument after --", []string{"--", "-json"}, 1, []string{"-json"}, false, "", ""},
		{"flags then -- then a flag-like argument", []string{"--actor", "ops", "--", "--actor"}, 1, []string{"--actor"}, false, "ops", ""},
		{"everything after -- is an argument", []string{"--", "a", "--json"}, 2, []string{"a", "--json"}, false, "", ""},
		{"-- as a flag's value is not the end of flags", []string{"--actor", "--", "a", "--json"}, 1, []string{"a"}, true, "--", ""},
		{"a bool flag before --", []string{"--json", "--", "-x"}, 1, []string{"-x"}, true, "", ""},
		{"too many after --", []string{"--", "-x", "-y"}, 1, nil, false, "", "one ARGUMENT argument expected, got 2"},
		{"unexpected after --", []string{"--", "-x"}, 0, nil, false, "", `unexpected argument "-x"`},
		{"unknown flag", []string{"a", "--bogus"}, 1, nil, false, "", "bogus"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			asJSON := fs.Bool("json", false, "")
			actor := fs.String("actor", "", "")
			err := parseWithArgs(fs, c.args, c.n)
			if c.errorHas != "" {
				require.ErrorContains(t, err, c.errorHas)
				require.ErrorAs(t, err, new(usageError))
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, fs.Args())
			require.Equal(t, c.json, *asJSON, "--json")
			require.Equal(t, c.actor, *actor, "--actor")
		})
	}
}

// Through the CLI: "status -- -x" is a bad task ID (2), not a bad flag
// (1), and "schedule remove -- -json" looks for a schedule named -json
// instead of turning --json on.
func TestArgumentsAfterDoubleDashStayArguments(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.submit("ana", "k1", onePayload)
	requireUsage(t, f.do("status", "--", "-x"), "task", `"-x"`)
	before := snapshot(t, f.dir)
	r := f.lh([]string{"schedule", "remove"}, "--actor", "ops", "--", "-json")
	requireFailed(t, r, "-json", "not found")
	require.Equal(t, before, snapshot(t, f.dir))
}

// limits --user U without a change shows the limits and writes nothing:
// no user-limit row, no audit event.
func TestLimitsWithABareUserOnlyShows(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.submit("ana", "k1", onePayload)
	before := snapshot(t, f.dir)
	r := f.do("limits", "--user", "ana", "--actor", "ops", "--json")
	requireOK(t, r)
	var out map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	require.Equal(t, []any{}, out["users"], "no user limit was written")
	require.Equal(t, float64(model.DefaultLimits.DepthMax), out["limits"].(map[string]any)["depth_max"])
	requireOK(t, f.do("limits", "--user", "ana"))
	require.Equal(t, before, snapshot(t, f.dir), "showing limits changed the database")
	f.withQueue(func(ctx context.Context, q *queue.Queue) {
		events, err := q.Events(ctx, "")
		require.NoError(t, err)
		for _, e := range events {
			require.NotEqual(t, model.EventLimitsSet, e.Kind, "%+v", e)
		}
		_, users, err := q.Limits(ctx)
		require.NoError(t, err)
		require.Empty(t, users)
	})

	// With a change it sets that user's limit, as before.
	requireOK(t, f.do("limits", "--user", "ana", "--depth-max", "3", "--actor", "ops"))
	f.withQueue(func(ctx context.Context, q *queue.Queue) {
		_, users, err := q.Limits(ctx)
		require.NoError(t, err)
		require.Equal(t, []model.UserLimit{{User: "ana", RunningMax: model.Inherit, DepthMax: 3}}, users)
	})
}

// Every command and subcommand answers --help with exit 0 and its usage
// on stdout, touching nothing; the help says what restricts it.
func TestHelpOnEveryCommandAndSubcommand(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	var all [][]string
	for name := range commands {
		all = append(all, []string{name})
		for _, sub := range subcommands[name] {
			all = append(all, []string{name, sub.name})
		}
	}
	for _, words := range all {
		for _, ask := range []string{"--help", "-h"} {
			r := lh(t, append(words, ask)...)
			requireOK(t, r)
			require.True(t, strings.HasPrefix(r.stdout, "usage: leasehold "+strings.Join(words, " ")), "%v %s: %s", words, ask, r.stdout)
		}
	}
	for _, name := range []string{"schedule", "snapshot"} {
		for _, ask := range []string{"--help", "-h", "help"} {
			r := lh(t, name, ask)
			requireOK(t, r)
			for _, sub := range subcommands[name] {
				require.Contains(t, r.stdout, "  "+sub.name+" ", "%s %s lists %s", name, ask, sub.name)
			}
		}
	}
	for _, words := range [][]string{{"snapshot", "create"}, {"snapshot", "verify"}, {"restore"}, {"migrate"}} {
		r := lh(t, append(words, "--help")...)
		require.Contains(t, r.stdout, "LEASEHOLD_DATA_DIR", "%v states the allowed directory", words)
		require.Contains(t, r.stdout, "working directory", "%v", words)
	}
	r := lh(t, "restore", "--help")
	require.Contains(t, r.stdout, "usage: leasehold restore SNAPSHOT [flags]")
	r = lh(t, "limits", "--help")
	require.NotContains(t, r.stdout, "(default -2)")
	require.Contains(t, r.stdout, fmt.Sprintf("a new database has %d", model.DefaultLimits.DepthMax))
	require.Empty(t, snapshot(t, dir), "asking for help created nothing")
}

// commandWords is every command, and every subcommand of those that take
// one, as the words that run it.
func commandWords() [][]string {
	var all [][]string
	for name := range commands {
		all = append(all, []string{name})
		for _, sub := range subcommands[name] {
			all = append(all, []string{name, sub.name})
		}
	}
	return all
}

// TestHelpCommandIsTheCommandsHelp: leasehold help COMMAND [SUBCOMMAND]
// prints what COMMAND [SUBCOMMAND] --help prints (it printed the general
// help), and help of an unknown command is refused.
func TestHelpCommandIsTheCommandsHelp(t *testing.T) {
	for _, words := range commandWords() {
		want := lh(t, append(words, "--help")...)
		requireOK(t, want)
		got := lh(t, append([]string{"help"}, words...)...)
		requireOK(t, got)
		require.Equal(t, want.stdout, got.stdout, "help %s", strings.Join(words, " "))
	}
	requireUsage(t, lh(t, "help", "bogus"), `unknown command "bogus"`)
	r := lh(t, "help")
	requireOK(t, r)
	require.Contains(t, r.stdout, "leasehold help COMMAND")
}

// TestDBFlagHelpStatesItsDefaultOnce: --db's help states its default in
// words, once, and never the value LEASEHOLD_DB holds (a password in
// it was printed as the flag's default).
func TestDBFlagHelpStatesItsDefaultOnce(t *testing.T) {
	t.Setenv("LEASEHOLD_DB", "postgres://ops:SECRETPW@db.example:5432/leasehold")
	n := 0
	for _, words := range commandWords() {
		r := lh(t, append(words, "--help")...)
		requireOK(t, r)
		require.NotContains(t, r.stdout, "SECRETPW", "%v", words)
		_, db, ok := strings.Cut(r.stdout, "\n  -db ")
		if !ok || words[0] == "sim" { // sim's --db is the PostgreSQL server of its worlds
			continue
		}
		db, _, _ = strings.Cut(db, "\n  -")
		require.Equal(t, 1, strings.Count(db, "default"), "%v: %q", words, db)
		require.Contains(t, db, "(default: $LEASEHOLD_DB, or leasehold.db when it is not set)", "%v", words)
		n++
	}
	require.Greater(t, n, 20, "the commands that take --db")
}

// Bad usage is told in the binary's words: the flag with its dashes, the
// rule, the value as typed (its characters kept), the positional argument
// by its name; never the flag package's or Go's.
func TestUsageErrorsSayWhatWasWrong(t *testing.T) {
	f := newMissing(t)
	submit := func(extra ...string) []string {
		return append([]string{"submit", "--db", f.db, "--user", "ana", "--key", "k1", "--payload", onePayload,
			"--cost-budget", "5", "--steps-max", "2"}, extra...)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{submit("--cost-budget", "ten"), `--cost-budget: must be a whole number, got "ten"`},
		{submit("--cost-budget", "99999999999999999999"), "--cost-budget: must be a whole number that fits in 64 bits"},
		{submit("--bogus"), "unknown flag --bogus (leasehold submit --help lists the flags)"},
		{submit("--json=maybe"), `--json: must be true or false, got "maybe"`},
		{submit("--key"), "--key: needs a value"},
		{submit("--user", "jürgen"), "user: character 'ü' at offset 1 is not allowed"},
		{submit("--run-at", "0001-01-01T00:00:00Z"),
			"--run-at: must be from 2000-01-01T00:00:00Z to 9999-12-31T00:00:00Z inclusive, got 0001-01-01T00:00:00Z"},
		{submit("--deadline", "9999-12-31T23:59:59Z"),
			"deadline: must be from 2000-01-01T00:00:00Z to 9999-12-31T00:00:00Z inclusive, got 9999-12-31T23:59:59Z"},
		{submit("--run-at", "demain à midi"), `--run-at: "demain à midi" is not an RFC 3339 time or +DURATION`},
		{[]string{"schedule", "add", "--period", "5x"}, `--period: must be a duration such as 500ms, 30s or 5m, got "5x"`},
		{[]string{"schedule"}, "say add, list, run or remove (leasehold schedule --help)"},
		{[]string{"snapshot"}, "say create or verify (leasehold snapshot --help)"},
		{[]string{"status"}, "TASK argument required (usage: leasehold status TASK [flags])"},
		{[]string{"restore"}, "SNAPSHOT argument required (usage: leasehold restore SNAPSHOT [flags])"},
		{[]string{"restore", "a.db", "b.db", "--to", "c.db"}, "one SNAPSHOT argument expected, got 2"},
		{[]string{"restore", "", "--to", "c.db"}, "SNAPSHOT: path required"},
		{[]string{"list", "extra"}, `unexpected argument "extra" (leasehold list takes flags only)`},
		{[]string{"approve", "t_ab", "--version", "-3", "--db", f.db}, "--version: must be 0 or more, got -3"},
		{[]string{"approve", "t_ab", "--db", f.db}, "--version: required"},
		{[]string{"reject", "t_ab", "--db", f.db}, "--version: required (the version status shows for the gate)"},
		{[]string{"resolve", "t_ab", "--as", "maybe", "--db", f.db}, `--as: must be completed, failed or cancelled, got "maybe"`},
		{[]string{"resolve", "t_ab", "--as", "running", "--db", f.db}, `--as: must be completed, failed or cancelled, got "running"`},
		{[]string{"resolve", "t_ab", "--db", f.db}, "--as: required: completed, failed or cancelled"},
		{[]string{"requeue", "t_ab", "--grant-cost", "-1", "--grant-steps", "0", "--db", f.db}, "--grant-cost: must be 0 or more, got -1"},
		{[]string{"requeue", "t_ab", "--grant-cost", "1", "--db", f.db}, "--grant-cost and --grant-steps: both required"},
	} {
		r := lh(t, c.args...)
		requireUsage(t, r, c.want)
		for _, internal := range []string{"flag provided", "parse error", "invalid value", "Go ", "EOF", "Ã"} {
			require.NotContains(t, r.stderr, internal, "%v", c.args)
		}
	}
	require.NoFileExists(t, f.db, "nothing was created")
}

// TestAMistypedDatabaseIsNeverCreated: a command that finds no database
// at --db (or LEASEHOLD_DB) says so, exits 2 and creates nothing; only
// migrate makes a new database, saying that it did.
func TestAMistypedDatabaseIsNeverCreated(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	t.Setenv("LEASEHOLD_DATA_DIR", dir)
	typo := filepath.Join(dir, "typo.db")
	batch := filepath.Join(t.TempDir(), "batch.jsonl")
	require.NoError(t, os.WriteFile(batch, []byte(`{"user":"ana","key":"b1","payload":{"steps":[]},"cost_budget":5,"steps_max":1}`+"\n"), 0o600))
	tokens := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte("ops operate ops-secret-0123456789 *\n"), 0o600))
	for _, args := range [][]string{
		{"submit", "--user", "ana", "--key", "k1", "--payload", onePayload, "--cost-budget", "5", "--steps-max", "2"},
		{"submit", "--batch", batch},
		{"worker", "--id", "w1"},
		{"serve", "--addr", "127.0.0.1:0", "--tokens", tokens},
		{"status", testkit.UnknownTask},
		{"list"},
		{"cancel", testkit.UnknownTask, "--actor", "ops"},
		{"limits", "--depth-max", "5", "--actor", "ops"},
		{"schedule", "add", "--user", "ana", "--payload", onePayload, "--cost-budget", "5", "--steps-max", "2",
			"--origin", "+1h", "--period", "1h", "--actor", "ops"},
		{"reap"},
	} {
		requireUsage(t, lh(t, append(args, "--db", typo)...), "no database at "+typo, "leasehold migrate --db "+typo)
		require.NoFileExists(t, typo, "%v created the database", args)
		t.Setenv("LEASEHOLD_DB", typo)
		requireUsage(t, lh(t, args...), "no database at "+typo)
		require.NoFileExists(t, typo, "%v created the database named by LEASEHOLD_DB", args)
		t.Setenv("LEASEHOLD_DB", "")
	}
	require.Empty(t, snapshot(t, dir), "nothing was created")

	r := lh(t, "migrate", "--db", typo, "--actor", "ops")
	requireOK(t, r)
	require.Contains(t, r.stdout, "created "+typo+" at schema version")
	require.FileExists(t, typo)
	requireOK(t, lh(t, "submit", "--db", typo, "--user", "ana", "--key", "k1", "--payload", onePayload,
		"--cost-budget", "5", "--steps-max", "2"))
}

// Without --db a command uses LEASEHOLD_DB, as DESIGN.md says.
func TestDatabaseFromTheEnvironment(t *testing.T) {
	f := newFixture(t)
	id := f.submit("ana", "env-1", onePayload)
	t.Setenv("LEASEHOLD_DB", f.db)
	r := lh(t, "status", id)
	requireOK(t, r)
	require.Contains(t, r.stdout, "task "+id)
	r = lh(t, "status", id, "--db", filepath.Join(f.dir, "other.db"))
	requireUsage(t, r, "no database at", "other.db")
}

// uuidIDs hands out UUID-shaped task IDs, as a Go program's own IDSource
// might.
type uuidIDs struct{ n int }

func (u *uuidIDs) NewID(prefix string) string {
	u.n++
	return fmt.Sprintf("%s550e8400-e29b-41d4-a716-%012x", prefix, u.n)
}

// TestCommandsTakeTheQueuesTaskIDs: a task a Go program submitted with an
// ID source of its own (UUID-shaped IDs) is named to status, events,
// cancel and audit as the queue stored it; the command line's rule is
// the queue's (model.TaskIDRule), and what breaks it is refused saying
// the rule. status refused such IDs ("t_ followed by hex digits").
func TestCommandsTakeTheQueuesTaskIDs(t *testing.T) {
	t.Parallel()
	f := newMissing(t)
	ctx := context.Background()
	q, err := queue.Open(ctx, queue.Options{Path: f.db, Clock: clockwork.NewRealClock(), IDs: &uuidIDs{}})
	require.NoError(t, err)
	res, err := q.Submit(ctx, model.SubmitRequest{User: "ana", Key: "k1", Payload: onePayload, CostBudget: 5, StepsMax: 2})
	require.NoError(t, err)
	require.NoError(t, q.Close())
	id := res.TaskID
	require.Equal(t, "t_550e8400-e29b-41d4-a716-000000000001", id)

	r := f.do("status", id)
	requireOK(t, r)
	require.Contains(t, r.stdout, "task "+id)
	requireOK(t, f.do("events", id))
	requireOK(t, f.do("audit", "--task", id))
	r = f.do("cancel", id, "--actor", "ops")
	requireOK(t, r)
	require.Contains(t, r.stdout, "cancelled")
	requireUsage(t, f.do("status", "t_a.b"), "not a task ID ("+model.TaskIDRule+")")
}

// TestResolveAsIsOneSentence: resolve --as names what it takes and what it
// got, in one sentence, as the queue and the API word it (it quoted the
// state parser's error and its Go list of every state inside).
func TestResolveAsIsOneSentence(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id, _ := f.toReview("k-review")
	r := f.do("resolve", id, "--as", "maybe", "--actor", "ops")
	require.Equal(t, exitUsage, r.code)
	require.Equal(t, "leasehold resolve: --as: must be completed, failed or cancelled, got \"maybe\"\n", r.stderr)
	f.withQueue(func(ctx context.Context, q *queue.Queue) {
		err := q.Resolve(ctx, id, model.State("maybe"), "ops")
		require.EqualError(t, err, `as: must be completed, failed or cancelled, got "maybe"`, "the queue's words, which the API answers")
	})
}

// TestRejectNeedsTheVersionAsApproveDoes: reject, like approve and like
// POST .../reject, names the version the gate recorded; without it the
// command refuses (it used to reject at whatever version the task waited
// at, while the API required one).
func TestRejectNeedsTheVersionAsApproveDoes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id, version := f.toApproval("k-gate")
	for _, name := range []string{"approve", "reject"} {
		requireUsage(t, f.do(name, id, "--actor", "boss"), "--version: required")
		r := f.do(name, "--help")
		require.Contains(t, r.stdout, "leasehold "+name+" TASK [flags]")
		require.Regexp(t, `-version int\n\s+the version recorded when the task paused \(status shows it\); required`, r.stdout)
	}
	require.Equal(t, "waiting_for_approval", f.statusJSON(id)["state"], "a refused reject changes nothing")
	requireOK(t, f.do("reject", id, "--version", strconv.FormatInt(version, 10), "--actor", "boss"))
	require.Equal(t, "cancelled", f.statusJSON(id)["state"])
}

// TestCancelledTaskNoLongerReadsRequested: a running task whose
// cancellation was requested reads "requested", and once its worker has
// stopped it reads "cancelled by", in status's text and record (it kept
// "cancel requested=true" and cancel_requested true); a task that
// completed before its worker saw the request says so.
func TestCancelledTaskNoLongerReadsRequested(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cancelled := f.submit("ana", "k1", onePayload, "--priority", "100")
	var c model.Claim
	f.withQueue(func(ctx context.Context, q *queue.Queue) { c = f.claim(ctx, q, cancelled) })
	requireOK(t, f.do("cancel", cancelled, "--actor", "bob"))
	r := f.do("status", cancelled)
	requireOK(t, r)
	require.Contains(t, r.stdout, "  cancel    requested by bob; the task stops before its next step\n")
	require.Equal(t, true, f.statusJSON(cancelled)["cancel_requested"])
	f.withQueue(func(ctx context.Context, q *queue.Queue) { require.NoError(t, q.AcknowledgeCancel(ctx, c)) })
	r = f.do("status", cancelled)
	requireOK(t, r)
	require.Contains(t, r.stdout, "  cancel    cancelled by bob\n")
	require.NotContains(t, r.stdout, "requested")
	rec := f.statusJSON(cancelled)
	require.Equal(t, "cancelled", rec["state"])
	require.Equal(t, false, rec["cancel_requested"], "nothing waits to be cancelled")
	require.Equal(t, "bob", rec["cancelled_by"])

	completed := f.submit("ana", "k2", onePayload, "--priority", "100")
	f.withQueue(func(ctx context.Context, q *queue.Queue) { c = f.claim(ctx, q, completed) })
	requireOK(t, f.do("cancel", completed, "--actor", "bob"))
	f.withQueue(func(ctx context.Context, q *queue.Queue) { require.NoError(t, q.Complete(ctx, c)) })
	r = f.do("status", completed)
	requireOK(t, r)
	require.Contains(t, r.stdout, "  cancel    requested by bob; the task completed first\n")
	require.Equal(t, false, f.statusJSON(completed)["cancel_requested"])
}

// TestInspectPrintsDurationsAsPeopleReadThem: inspect's text says
// queued_for=17m55s where it said queued_for=1075041ms; its --json keeps
// milliseconds.
func TestInspectPrintsDurationsAsPeopleReadThem(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	then := time.Now().Add(-(17*time.Minute + 55*time.Second))
	q, err := queue.Open(ctx, queue.Options{Path: f.db, Clock: clockwork.NewFakeClockAt(then), IDs: randomid.Source{}})
	require.NoError(t, err)
	id, err := q.Submit(ctx, model.SubmitRequest{User: "ana", Key: "k1", Payload: onePayload, CostBudget: 5, StepsMax: 2})
	require.NoError(t, err)
	require.NoError(t, q.Close())

	r := f.do("inspect")
	requireOK(t, r)
	require.Regexp(t, `(?m)^`+id.TaskID+` queued .* queued_for=17m5[5-9]s$`, r.stdout, "a few seconds may pass")
	require.NotContains(t, r.stdout, "ms")
	r = f.do("inspect", "--json")
	requireOK(t, r)
	var out []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.Len(t, out, 1)
	ms := out[0]["queued_for_ms"].(float64)
	require.GreaterOrEqual(t, ms, float64(1_075_000))
	require.Less(t, ms, float64(1_080_000))
}

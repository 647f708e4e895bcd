package liverun

// The live run's parts that need no live run: the fault entry, the span
// comparison, the result record's round trip and the caller's tokens.

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/faults"
	"github.com/leasehold/leasehold/httpapi"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/worker"
)

type nopQueue struct{ worker.Queue }

// The worker's queue is wrapped only when the variable names a write; an
// unknown write is refused naming the variable.
func TestWorkerQueueWrapsOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	inner := nopQueue{}
	got, err := WorkerQueue(inner, func(string) string { return "" })
	require.NoError(t, err)
	require.Equal(t, inner, got)

	got, err = WorkerQueue(inner, func(k string) string { return map[string]string{DuplicateEnv: "complete"}[k] })
	require.NoError(t, err)
	require.IsType(t, &faults.Queue{}, got)

	_, err = WorkerQueue(inner, func(string) string { return "compleet" })
	require.ErrorContains(t, err, DuplicateEnv)
	require.ErrorContains(t, err, "compleet")
}

func TestSpansOverlap(t *testing.T) {
	t.Parallel()
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	cases := []struct {
		name string
		a, b []span
		want bool
	}{
		{"one ends where the other starts", []span{{at(0), at(500)}}, []span{{at(500), at(900)}}, false},
		{"one starts a millisecond early", []span{{at(300), at(600)}}, []span{{at(200), at(301)}}, true},
		{"one inside the other", []span{{at(100), at(900)}}, []span{{at(400), at(450)}}, true},
		{"no spans", nil, []span{{at(100), at(200)}}, false},
	}
	for _, c := range cases {
		require.Equal(t, c.want, overlap(c.a, c.b), c.name)
		require.Equal(t, c.want, overlap(c.b, c.a), c.name+", swapped")
	}
}

// runSpans pairs each entry into running with the next exit from it.
func TestRunSpansFromEvents(t *testing.T) {
	t.Parallel()
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	events := []model.Event{
		{Kind: model.EventSubmitted, To: model.Queued, At: base},
		{Kind: model.EventClaimed, From: model.Queued, To: model.Running, At: base.Add(time.Second)},
		{Kind: model.EventStep, From: model.Running, To: model.Running, At: base.Add(2 * time.Second)},
		{Kind: model.EventLeaseExpired, From: model.Running, To: model.Queued, At: base.Add(3 * time.Second)},
		{Kind: model.EventClaimed, From: model.Queued, To: model.Running, At: base.Add(4 * time.Second)},
		{Kind: model.EventCompleted, From: model.Running, To: model.Completed, At: base.Add(5 * time.Second)},
	}
	require.Equal(t, []span{{base.Add(time.Second), base.Add(3 * time.Second)}, {base.Add(4 * time.Second), base.Add(5 * time.Second)}}, runSpans(events))
}

// A result written is read back with its typed timeline; a file that is
// not a live result is refused.
func TestResultRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "result.json")
	want := Result{Kind: Kind, Scenario: "portfolio", Started: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC),
		Outcomes: []Outcome{{Story: StoryKill, Name: "killed", Pass: true}},
		Timeline: []Moment{{AtMs: 5, Kind: WorkerSignalled, Worker: "w1", PID: 7, Signal: "SIGSTOP"}}}
	require.NoError(t, want.Write(path))
	got, err := Read(path)
	require.NoError(t, err)
	require.Equal(t, want.Timeline, got.Timeline)
	require.True(t, want.Started.Equal(got.Started))
	o, ok := got.Find(StoryKill, "")
	require.True(t, ok)
	require.Equal(t, "killed", o.Name)
	_, ok = got.Find(StoryStop, "")
	require.False(t, ok)
	require.Equal(t, "sent SIGSTOP to worker w1 (pid 7)", got.Timeline[0].String())

	require.NoError(t, Result{Kind: "fixture"}.Write(path))
	_, err = Read(path)
	require.ErrorContains(t, err, "not live")
}

// countingIDs numbers the IDs it hands out.
type countingIDs struct{ n int }

func (c *countingIDs) NewID(prefix string) string {
	c.n++
	return fmt.Sprintf("%s%016x", prefix, c.n)
}

// The run waits for its sampler to return before it reads the result, so
// nothing still appends to the samples it reports; the sampler reads the
// metrics of a real queue file.
func TestRunWaitsForTheSampler(t *testing.T) {
	ctx := context.Background()
	q, err := queue.Open(ctx, queue.Options{Path: filepath.Join(t.TempDir(), "q.db"), Clock: clockwork.NewRealClock(), IDs: &countingIDs{}})
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Close()) }()
	_, err = q.Submit(ctx, model.SubmitRequest{User: "ana", Key: "k", Payload: `{"steps":[{"cost":1}]}`, CostBudget: 5, StepsMax: 2})
	require.NoError(t, err)
	r := &run{ctx: ctx, q: q, start: time.Now(), sampling: make(chan struct{})}
	r.startSampling()
	r.stopSampling()
	// The sampler takes its first sample before it looks at the stop
	// signal; once stopSampling has returned, that sample is in.
	require.NotEmpty(t, r.res.Samples)
	require.Equal(t, int64(1), r.res.Samples[0].Metrics.Submitted)

	// Stopping a sampler that never started (the run failed early)
	// returns at once.
	idle := &run{sampling: make(chan struct{})}
	idle.stopSampling()
	require.Empty(t, idle.res.Samples)
}

// The caller's tokens parse under --strict-tokens, and each user's token
// acts for that user alone, recorded under the user's name: through a real
// server over a real queue file, ana's token submits as ana, is refused a
// submit for bo (nothing written), and the operator's sets limits under
// its own name.
func TestCallerTokensBindEachUser(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	users, approvers := scenarioActors(scenarios.Portfolio(), storyTasks)
	require.Subset(t, users, []string{"ana", "bo", "lena", "ivy", "gus"}, "the scenario's users and the stories'")
	require.Equal(t, []string{"manager"}, approvers, "the expected approver and the gate's name")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	c, err := newCaller("http://"+ln.Addr().String(), users, approvers)
	require.NoError(t, err)
	env, ok := strings.CutPrefix(c.tokensEnv(), "LEASEHOLD_TOKENS=")
	require.True(t, ok)
	tokens, err := httpapi.ParseTokens(strings.ReplaceAll(env, ";", "\n"), true)
	require.NoError(t, err, "every line names its users")
	require.Len(t, tokens, len(users)+len(approvers)+1)
	for _, tok := range tokens {
		p := tok.Principal()
		switch {
		case tok.Name() == operator:
			require.Equal(t, []string{model.ScopeOperate}, p.Scopes)
		case tok.Name() == "manager":
			require.Equal(t, []string{model.ScopeApprove}, p.Scopes)
		default:
			require.Equal(t, []string{model.ScopeSubmit}, p.Scopes, tok.Name())
			require.Equal(t, []string{tok.Name()}, p.Users, "a user's token acts for that user alone")
		}
	}

	q, err := queue.Open(ctx, queue.Options{Path: filepath.Join(t.TempDir(), "q.db"), Clock: clockwork.NewRealClock(), IDs: &countingIDs{}})
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Close()) }()
	served := make(chan error, 1)
	srv, err := httpapi.New(httpapi.Options{Queue: q, Tokens: tokens})
	require.NoError(t, err)
	go func() { served <- srv.Serve(ctx, ln, nil) }()
	defer func() {
		cancel()
		require.NoError(t, <-served)
	}()

	req := model.SubmitRequest{User: "ana", Key: "k", Payload: `{"steps":[{"cost":1}]}`, CostBudget: 5, StepsMax: 2}
	res, err := c.users["ana"].Submit(ctx, req)
	require.NoError(t, err)
	events, err := q.Events(ctx, res.TaskID)
	require.NoError(t, err)
	require.Equal(t, "ana", events[0].Actor)
	req.User = "bo"
	_, err = c.users["ana"].Submit(ctx, req)
	require.ErrorIs(t, err, client.ErrForbidden)
	_, err = c.approvers["manager"].Submit(ctx, req)
	require.ErrorIs(t, err, client.ErrForbidden)
	all, err := q.Events(ctx, "")
	require.NoError(t, err)
	require.Len(t, all, 1, "a refused submit writes nothing")

	_, err = c.operator.SetUserLimit(ctx, client.UserLimit{User: "lena", RunningMax: 1, DepthMax: model.Inherit})
	require.NoError(t, err)
	all, err = q.Events(ctx, "")
	require.NoError(t, err)
	require.Equal(t, operator, all[len(all)-1].Actor)
}

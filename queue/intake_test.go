package queue

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

func TestExactReplayReturnsOriginal(t *testing.T) {
	b := setup(t)
	r := b.request()
	first, err := b.q.Submit(b.ctx, r)
	require.NoError(t, err)
	require.False(t, first.Replay)
	b.advance(time.Hour)
	dump := b.dump()
	again, err := b.q.Submit(b.ctx, r)
	require.NoError(t, err)
	require.Equal(t, model.SubmitResult{TaskID: first.TaskID, Replay: true}, again)
	require.Equal(t, dump, b.dump(), "a replay writes nothing")
	require.Equal(t, int64(1), b.metrics().Submitted)
}

func TestReplayOfSettledTaskAndPassedDeadline(t *testing.T) {
	b := setup(t)
	r := b.request()
	r.Deadline = epoch.Add(time.Minute)
	first, err := b.q.Submit(b.ctx, r)
	require.NoError(t, err)
	b.advance(2 * time.Minute)
	require.Equal(t, 1, b.reap().Deadlines)
	// The deadline has passed and the task has failed; the replay is still
	// recognised, not refused as late or admitted as new.
	again, err := b.q.Submit(b.ctx, r)
	require.NoError(t, err)
	require.Equal(t, model.SubmitResult{TaskID: first.TaskID, Replay: true}, again)
}

func TestChangedRequestUnderUsedKeyConflicts(t *testing.T) {
	changes := map[string]func(*model.SubmitRequest){
		"payload":     func(r *model.SubmitRequest) { r.Payload = `{"steps":[{"cost":2}]}` },
		"number form": func(r *model.SubmitRequest) { r.Payload = `{"steps":[{"cost":1.0}]}` },
		"cost_budget": func(r *model.SubmitRequest) { r.CostBudget++ },
		"steps_max":   func(r *model.SubmitRequest) { r.StepsMax++ },
		"priority":    func(r *model.SubmitRequest) { r.Priority = 1 },
		"run_at":      func(r *model.SubmitRequest) { r.RunAt = epoch.Add(time.Millisecond) },
		"deadline":    func(r *model.SubmitRequest) { r.Deadline = epoch.Add(time.Hour) },
	}
	for name, change := range changes {
		t.Run(name, func(t *testing.T) {
			b := setup(t)
			r := b.request()
			first, err := b.q.Submit(b.ctx, r)
			require.NoError(t, err)
			before, dump := b.task(first.TaskID), b.dump()
			change(&r)
			_, err = b.q.Submit(b.ctx, r)
			require.ErrorIs(t, err, ErrIdempotencyConflict)
			require.Contains(t, err.Error(), first.TaskID)
			require.Equal(t, before, b.task(first.TaskID))
			require.Equal(t, dump, b.dump())
		})
	}
}

func TestSameKeyOtherUserIsAnotherTask(t *testing.T) {
	b := setup(t)
	r := b.request()
	ana, err := b.q.Submit(b.ctx, r)
	require.NoError(t, err)
	r.User = "bob"
	bob, err := b.q.Submit(b.ctx, r)
	require.NoError(t, err)
	require.False(t, bob.Replay)
	require.NotEqual(t, ana.TaskID, bob.TaskID)
	require.Equal(t, "bob", b.task(bob.TaskID).User)
	require.Equal(t, r.Key, b.task(bob.TaskID).Key)
	require.NotEqual(t, b.task(ana.TaskID).RequestHash, b.task(bob.TaskID).RequestHash)
}

func TestPayloadVariationsAreOneCanonicalRequest(t *testing.T) {
	b := setup(t)
	r := b.request()
	r.Payload = `{"b":[1,2,{"y":true,"x":null}],"a":"é\u00e9<>&","n":1.50}`
	first, err := b.q.Submit(b.ctx, r)
	require.NoError(t, err)
	task := b.task(first.TaskID)
	require.Equal(t, `{"a":"éé<>&","b":[1,2,{"x":null,"y":true}],"n":1.50}`, task.Payload, "stored canonical")
	for _, variant := range []string{
		" {\n\t\"n\" : 1.50 , \"a\":\"\\u00e9é<>&\",\r\n \"b\" : [ 1 ,2, { \"x\":null , \"y\" : true } ] } ",
		`{"a":"éé<>&","b":[1,2,{"x":null,"y":true}],"n":1.50}`,
		`{"n":1.50,"b":[1,2,{"y":true,"x":null}],"a":"\u00e9\u00E9\u003c\u003e\u0026"}`,
	} {
		r.Payload = variant
		again, err := b.q.Submit(b.ctx, r)
		require.NoError(t, err, variant)
		require.Equal(t, model.SubmitResult{TaskID: first.TaskID, Replay: true}, again, variant)
	}
	// Times are compared at the precision stored, in UTC.
	r.Payload = task.Payload
	r.RunAt = epoch.Add(time.Minute)
	r.Key = "timed"
	timed, err := b.q.Submit(b.ctx, r)
	require.NoError(t, err)
	r.RunAt = epoch.Add(time.Minute + 999*time.Microsecond).In(time.FixedZone("CET", 3600))
	again, err := b.q.Submit(b.ctx, r)
	require.NoError(t, err)
	require.Equal(t, model.SubmitResult{TaskID: timed.TaskID, Replay: true}, again)
}

// invalidRequests are requests that must be refused before anything is
// stored, each with the field its error must name.
func invalidRequests(valid model.SubmitRequest) []struct {
	name, field string
	req         model.SubmitRequest
} {
	type change = func(*model.SubmitRequest)
	cases := []struct {
		name, field string
		change      change
	}{
		{"user empty", "user", func(r *model.SubmitRequest) { r.User = "" }},
		{"user too long", "user", func(r *model.SubmitRequest) { r.User = strings.Repeat("a", model.UserLengthMax+1) }},
		{"user space", "user", func(r *model.SubmitRequest) { r.User = "ana b" }},
		{"user slash", "user", func(r *model.SubmitRequest) { r.User = "ana/b" }},
		{"user non-ASCII", "user", func(r *model.SubmitRequest) { r.User = "anä" }},
		{"key empty", "key", func(r *model.SubmitRequest) { r.Key = "" }},
		{"key too long", "key", func(r *model.SubmitRequest) { r.Key = strings.Repeat("k", model.KeyLengthMax+1) }},
		{"key space", "key", func(r *model.SubmitRequest) { r.Key = "k 1" }},
		{"key hash", "key", func(r *model.SubmitRequest) { r.Key = "k#1" }},
		{"key NUL", "key", func(r *model.SubmitRequest) { r.Key = "k\x001" }},
		{"key of a schedule run", "key", func(r *model.SubmitRequest) { r.Key = model.RunKey("s_0123456789abcdef", 0) }},
		{"payload empty", "payload", func(r *model.SubmitRequest) { r.Payload = "" }},
		{"payload not JSON", "payload", func(r *model.SubmitRequest) { r.Payload = `{"a":` }},
		{"payload garbage", "payload", func(r *model.SubmitRequest) { r.Payload = `steps` }},
		{"payload array", "payload", func(r *model.SubmitRequest) { r.Payload = `[{"a":1}]` }},
		{"payload string", "payload", func(r *model.SubmitRequest) { r.Payload = `"{}"` }},
		{"payload number", "payload", func(r *model.SubmitRequest) { r.Payload = `1` }},
		{"payload null", "payload", func(r *model.SubmitRequest) { r.Payload = `null` }},
		{"payload too large", "payload", func(r *model.SubmitRequest) {
			r.Payload = `{"a":"` + strings.Repeat("x", model.PayloadBytesMax) + `"}`
		}},
		{"payload duplicate keys", "payload", func(r *model.SubmitRequest) { r.Payload = `{"a":1,"b":2,"a":1}` }},
		{"payload nested duplicate keys", "payload", func(r *model.SubmitRequest) { r.Payload = `{"a":[{"x":1,"x":2}]}` }},
		{"payload too deep", "payload", func(r *model.SubmitRequest) {
			r.Payload = `{"a":` + strings.Repeat("[", model.JSONDepthMax) + strings.Repeat("]", model.JSONDepthMax) + `}`
		}},
		{"payload trailing value", "payload", func(r *model.SubmitRequest) { r.Payload = `{"a":1}{"b":2}` }},
		{"payload trailing garbage", "payload", func(r *model.SubmitRequest) { r.Payload = `{"a":1} x` }},
		{"payload bad UTF-8", "payload", func(r *model.SubmitRequest) { r.Payload = "{\"a\":\"\xff\"}" }},
		{"cost_budget zero", "cost_budget", func(r *model.SubmitRequest) { r.CostBudget = 0 }},
		{"cost_budget negative", "cost_budget", func(r *model.SubmitRequest) { r.CostBudget = -5 }},
		{"cost_budget too large", "cost_budget", func(r *model.SubmitRequest) { r.CostBudget = model.CostBudgetMax + 1 }},
		{"steps_max zero", "steps_max", func(r *model.SubmitRequest) { r.StepsMax = 0 }},
		{"steps_max too large", "steps_max", func(r *model.SubmitRequest) { r.StepsMax = model.StepsMaxLimit + 1 }},
		{"priority too low", "priority", func(r *model.SubmitRequest) { r.Priority = model.PriorityMin - 1 }},
		{"priority too high", "priority", func(r *model.SubmitRequest) { r.Priority = model.PriorityMax + 1 }},
		{"run_at before 2000", "run_at", func(r *model.SubmitRequest) { r.RunAt = time.Date(1999, 12, 31, 23, 59, 59, 0, time.UTC) }},
		{"run_at seconds as milliseconds", "run_at", func(r *model.SubmitRequest) { r.RunAt = time.UnixMilli(epoch.Unix()) }},
		{"run_at past 9999", "run_at", func(r *model.SubmitRequest) { r.RunAt = time.Date(9999, 12, 31, 0, 0, 1, 0, time.UTC) }},
		{"deadline out of range", "deadline", func(r *model.SubmitRequest) { r.Deadline = time.Unix(1, 0) }},
		{"deadline before run_at", "deadline", func(r *model.SubmitRequest) {
			r.RunAt, r.Deadline = epoch.Add(time.Hour), epoch.Add(time.Minute)
		}},
		{"deadline at run_at", "deadline", func(r *model.SubmitRequest) { r.RunAt, r.Deadline = epoch.Add(time.Hour), epoch.Add(time.Hour) }},
		{"deadline passed", "deadline", func(r *model.SubmitRequest) { r.Deadline = epoch.Add(-time.Millisecond) }},
		{"schedule_id from a caller", "schedule_id", func(r *model.SubmitRequest) { r.ScheduleID = "s_x" }},
		{"schedule_run from a caller", "schedule_id", func(r *model.SubmitRequest) { r.ScheduleRun = 3 }},
	}
	out := make([]struct {
		name, field string
		req         model.SubmitRequest
	}, len(cases))
	for i, c := range cases {
		r := valid
		c.change(&r)
		out[i].name, out[i].field, out[i].req = c.name, c.field, r
	}
	return out
}

// fileHashes hashes the database file and its -wal and -shm companions.
func fileHashes(t *testing.T, path string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		body, err := os.ReadFile(path + suffix)
		if errors.Is(err, os.ErrNotExist) {
			out[suffix] = "absent"
			continue
		}
		require.NoError(t, err)
		sum := sha256.Sum256(body)
		out[suffix] = hex.EncodeToString(sum[:])
	}
	return out
}

func TestInvalidRequestsWriteNothing(t *testing.T) {
	b := setupFile(t)
	// The queue's setup writes (schema, a user, a task) are done and read
	// back before the files are hashed.
	b.submit()
	b.task(b.submit())
	valid := b.request()
	valid.Key = "fresh"
	for _, tc := range invalidRequests(valid) {
		t.Run(tc.name, func(t *testing.T) {
			files, dump := fileHashes(t, b.path), b.dump()
			_, err := b.q.Submit(b.ctx, tc.req)
			require.ErrorIs(t, err, ErrInvalidInput)
			var ve *model.ValidationError
			require.ErrorAs(t, err, &ve)
			require.Equal(t, tc.field, ve.Field, "error: %v", err)
			require.True(t, strings.HasPrefix(err.Error(), tc.field+": "), "the message names the field: %v", err)
			require.Equal(t, dump, b.dump())
			require.Equal(t, files, fileHashes(t, b.path), "database files changed")
		})
	}
	// The same key with a valid request is still free.
	res, err := b.q.Submit(b.ctx, valid)
	require.NoError(t, err)
	require.False(t, res.Replay)
}

func TestValidRequestsAtTheBounds(t *testing.T) {
	b := setup(t)
	for _, change := range []func(*model.SubmitRequest){
		func(r *model.SubmitRequest) { r.User = strings.Repeat("a", model.UserLengthMax) },
		func(r *model.SubmitRequest) { r.User = "a.b_c-d@e.example" },
		func(r *model.SubmitRequest) { r.Key = strings.Repeat("k", model.KeyLengthMax) },
		func(r *model.SubmitRequest) { r.Key = "order:42/line.1_a-b" },
		func(r *model.SubmitRequest) {
			r.Payload = `{"a":"` + strings.Repeat("x", model.PayloadBytesMax-8) + `"}`
		},
		func(r *model.SubmitRequest) {
			r.Payload = `{"a":` + strings.Repeat("[", model.JSONDepthMax-1) + strings.Repeat("]", model.JSONDepthMax-1) + `}`
		},
		func(r *model.SubmitRequest) { r.CostBudget, r.StepsMax = 1, 1 },
		func(r *model.SubmitRequest) { r.CostBudget, r.StepsMax = model.CostBudgetMax, model.StepsMaxLimit },
		func(r *model.SubmitRequest) { r.Priority = model.PriorityMin },
		func(r *model.SubmitRequest) { r.Priority = model.PriorityMax },
		func(r *model.SubmitRequest) { r.RunAt = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC) },
		func(r *model.SubmitRequest) { r.Deadline = epoch.Add(time.Millisecond) },
		func(r *model.SubmitRequest) {
			r.RunAt, r.Deadline = epoch.Add(time.Hour), epoch.Add(time.Hour+time.Millisecond)
		},
	} {
		r := b.request()
		change(&r)
		res, err := b.q.Submit(b.ctx, r)
		require.NoError(t, err, "%+v", r)
		task := b.task(res.TaskID)
		require.Equal(t, r.User, task.User)
		require.Equal(t, r.CostBudget, task.CostBudget)
	}
}

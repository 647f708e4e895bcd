package model

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

var testEpoch = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

func validRequest() SubmitRequest {
	return SubmitRequest{User: "ana", Key: "k1", Payload: `{"steps":[{"cost":1}]}`, CostBudget: 10, StepsMax: 5}
}

func TestNormalizeCanonicalForm(t *testing.T) {
	r := validRequest()
	r.Payload = " {\"steps\" : [ {\"cost\":1} ], \"a\":\"\\u00e9\"} "
	r.RunAt = time.Date(2026, 3, 1, 10, 0, 0, 123_456_789, time.FixedZone("CET", 3600))
	r.Deadline = r.RunAt.Add(time.Hour)
	n, err := Normalize(r)
	require.NoError(t, err)
	require.Equal(t, `{"a":"é","steps":[{"cost":1}]}`, n.Payload)
	require.Equal(t, time.Date(2026, 3, 1, 9, 0, 0, 123_000_000, time.UTC), n.RunAt)
	require.Equal(t, time.UTC, n.RunAt.Location())
	require.Equal(t, n.RunAt.Add(time.Hour), n.Deadline)
	require.Len(t, n.Hash, 64)

	again, err := Normalize(n.SubmitRequest)
	require.NoError(t, err)
	require.Equal(t, n, again, "normalizing a normalized request changes nothing")
}

// TestRequestHashCoversEveryField changes one field at a time: each change
// must change the hash, or a changed request would pass as a replay.
func TestRequestHashCoversEveryField(t *testing.T) {
	base, err := Normalize(validRequest())
	require.NoError(t, err)
	changes := map[string]func(*SubmitRequest){
		"user":         func(r *SubmitRequest) { r.User = "bob" },
		"key":          func(r *SubmitRequest) { r.Key = "k2" },
		"payload":      func(r *SubmitRequest) { r.Payload = `{"steps":[{"cost":2}]}` },
		"cost_budget":  func(r *SubmitRequest) { r.CostBudget = 11 },
		"steps_max":    func(r *SubmitRequest) { r.StepsMax = 6 },
		"priority":     func(r *SubmitRequest) { r.Priority = -1 },
		"run_at":       func(r *SubmitRequest) { r.RunAt = testEpoch },
		"deadline":     func(r *SubmitRequest) { r.Deadline = testEpoch },
		"schedule_id":  func(r *SubmitRequest) { r.ScheduleID = "s_1" },
		"schedule_run": func(r *SubmitRequest) { r.ScheduleRun = 1 },
		"kind":         func(r *SubmitRequest) { r.Kind = "report" },
		// Length prefixes keep field boundaries: moving a byte from one
		// field to the next is a different request.
		"boundary": func(r *SubmitRequest) { r.User, r.Key = "an", "ak1" },
	}
	seen := map[string]string{base.Hash: "base"}
	for name, change := range changes {
		r := validRequest()
		change(&r)
		n, err := Normalize(r)
		require.NoError(t, err, name)
		other, dup := seen[n.Hash]
		require.False(t, dup, "%s hashes like %s", name, other)
		seen[n.Hash] = name
	}
}

// TestSyntheticRequestHashUnchanged pins the hash of requests that name
// no kind, as computed before tasks had kinds: a stored hash (a tombstone
// keeps nothing else) must still recognise its replay. Naming the kind
// synthetic is the same request.
func TestSyntheticRequestHashUnchanged(t *testing.T) {
	full := SubmitRequest{User: "ana", Key: "k1", Payload: `{"steps":[{"cost":1}]}`, CostBudget: 10, StepsMax: 5,
		Priority: 3, RunAt: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC), Deadline: time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC),
		ScheduleID: "s_1", ScheduleRun: 4}
	for _, tc := range []struct {
		req  SubmitRequest
		hash string
	}{
		{validRequest(), "82e6c2202e65bb633be0395b9784a3f87fafc9bf7caac8b118d68d412c1fb002"},
		{full, "4f3f36f5eb292188eb898767054539a6b36f75e835a8d8a411276edf17d5f094"},
	} {
		for _, kind := range []string{"", KindSynthetic} {
			r := tc.req
			r.Kind = kind
			n, err := Normalize(r)
			require.NoError(t, err)
			require.Equal(t, tc.hash, n.Hash, "kind %q", kind)
			require.Equal(t, KindSynthetic, n.Kind)
		}
	}
}

func TestCheckKind(t *testing.T) {
	for _, ok := range []string{"a", "report", "send-email", "billing.invoice_v2", strings.Repeat("k", KindLengthMax)} {
		require.NoError(t, CheckKind("kind", ok), ok)
	}
	for _, bad := range []string{"", "Report", "1st", "-x", ".", "a b", "a/b", "é", strings.Repeat("k", KindLengthMax+1)} {
		err := CheckKind("kind", bad)
		var v *ValidationError
		require.True(t, errors.As(err, &v), "%q: %v", bad, err)
		require.Equal(t, "kind", v.Field)
	}
}

func TestNormalizeRefusesEachField(t *testing.T) {
	for _, tc := range []struct {
		field  string
		change func(*SubmitRequest)
	}{
		{"user", func(r *SubmitRequest) { r.User = "" }},
		{"user", func(r *SubmitRequest) { r.User = strings.Repeat("u", UserLengthMax+1) }},
		{"user", func(r *SubmitRequest) { r.User = "a:b" }},
		{"user", func(r *SubmitRequest) { r.User = "." }},
		{"user", func(r *SubmitRequest) { r.User = ".." }},
		{"key", func(r *SubmitRequest) { r.Key = "" }},
		{"key", func(r *SubmitRequest) { r.Key = strings.Repeat("k", KeyLengthMax+1) }},
		{"key", func(r *SubmitRequest) { r.Key = "a@b" }},
		{"payload", func(r *SubmitRequest) { r.Payload = "" }},
		{"payload", func(r *SubmitRequest) { r.Payload = "[]" }},
		{"payload", func(r *SubmitRequest) { r.Payload = "{} {}" }},
		{"payload", func(r *SubmitRequest) { r.Payload = "{\"a\":\"\xc3\"}" }},
		{"payload", func(r *SubmitRequest) { r.Payload = `{"a":"` + strings.Repeat("x", PayloadBytesMax) + `"}` }},
		{"cost_budget", func(r *SubmitRequest) { r.CostBudget = 0 }},
		{"cost_budget", func(r *SubmitRequest) { r.CostBudget = CostBudgetMax + 1 }},
		{"steps_max", func(r *SubmitRequest) { r.StepsMax = 0 }},
		{"steps_max", func(r *SubmitRequest) { r.StepsMax = StepsMaxLimit + 1 }},
		{"priority", func(r *SubmitRequest) { r.Priority = PriorityMin - 1 }},
		{"priority", func(r *SubmitRequest) { r.Priority = PriorityMax + 1 }},
		{"run_at", func(r *SubmitRequest) { r.RunAt = time.Date(1999, 12, 31, 23, 59, 59, 999_000_000, time.UTC) }},
		{"run_at", func(r *SubmitRequest) { r.RunAt = time.Date(9999, 12, 31, 0, 0, 0, 1_000_000, time.UTC) }},
		{"deadline", func(r *SubmitRequest) { r.Deadline = time.Date(1970, 1, 1, 0, 0, 1, 0, time.UTC) }},
		{"deadline", func(r *SubmitRequest) { r.RunAt, r.Deadline = testEpoch, testEpoch }},
		{"deadline", func(r *SubmitRequest) { r.RunAt, r.Deadline = testEpoch, testEpoch.Add(-time.Second) }},
		// Equal once truncated to the stored precision.
		{"deadline", func(r *SubmitRequest) { r.RunAt, r.Deadline = testEpoch, testEpoch.Add(999*time.Microsecond) }},
	} {
		r := validRequest()
		tc.change(&r)
		_, err := Normalize(r)
		require.ErrorIs(t, err, ErrInvalidInput, tc.field)
		var ve *ValidationError
		require.ErrorAs(t, err, &ve)
		require.Equal(t, tc.field, ve.Field, "error: %v", err)
		require.NotEmpty(t, ve.Problem)
	}
	for _, change := range []func(*SubmitRequest){
		func(r *SubmitRequest) { r.RunAt = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC) },
		func(r *SubmitRequest) { r.RunAt = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC) },
		func(r *SubmitRequest) { r.RunAt, r.Deadline = testEpoch, testEpoch.Add(time.Millisecond) },
		func(r *SubmitRequest) { r.Deadline = testEpoch },
		func(r *SubmitRequest) {
			r.User, r.Key = strings.Repeat("u", UserLengthMax), strings.Repeat("k", KeyLengthMax)
		},
	} {
		r := validRequest()
		change(&r)
		_, err := Normalize(r)
		require.NoError(t, err)
	}
}

func TestCheckTimely(t *testing.T) {
	r := validRequest()
	r.Deadline = testEpoch
	n, err := Normalize(r)
	require.NoError(t, err)
	require.NoError(t, n.CheckTimely(testEpoch.Add(-time.Millisecond)))
	require.NoError(t, n.CheckTimely(testEpoch), "a deadline at now has not passed (claim and reaper agree)")
	require.NoError(t, n.CheckTimely(testEpoch.Add(999*time.Microsecond)), "now is truncated to milliseconds")
	err = n.CheckTimely(testEpoch.Add(time.Millisecond))
	require.ErrorIs(t, err, ErrInvalidInput, "a deadline before now has passed")
	var ve *ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "deadline", ve.Field)
	require.NoError(t, n.CheckTimely(testEpoch.Add(-time.Microsecond)), "truncated to the millisecond before")

	task := Task{Deadline: testEpoch}
	require.False(t, task.PastDeadline(testEpoch), "at the deadline")
	require.True(t, task.PastDeadline(testEpoch.Add(time.Millisecond)))
	require.False(t, Task{}.PastDeadline(testEpoch.Add(1000*time.Hour)), "no deadline never passes")
	for _, now := range []time.Time{testEpoch.Add(-time.Millisecond), testEpoch, testEpoch.Add(time.Millisecond)} {
		require.Equal(t, task.PastDeadline(now), n.CheckTimely(now) != nil, "submit and task agree at %v", now)
	}
	r.Deadline = time.Time{}
	n, err = Normalize(r)
	require.NoError(t, err)
	require.NoError(t, n.CheckTimely(testEpoch.Add(1000*time.Hour)))
}

func TestValidationError(t *testing.T) {
	err := error(&ValidationError{Field: "user", Problem: "required"})
	require.Equal(t, "user: required", err.Error())
	require.ErrorIs(t, err, ErrInvalidInput)
	require.NotErrorIs(t, err, ErrNotFound)
	wrapped := errors.Join(errors.New("submit"), err)
	var ve *ValidationError
	require.ErrorAs(t, wrapped, &ve)
	require.Equal(t, "user", ve.Field)
}

// FuzzNormalize checks that Normalize never panics, refuses only with a
// ValidationError naming a field, and otherwise returns a request that is
// valid and canonical: normalizing it again gives the same request and the
// same hash.
func FuzzNormalize(f *testing.F) {
	ms := func(t time.Time) int64 { return t.UnixMilli() }
	f.Add("ana", "k1", `{"steps":[{"cost":1}]}`, int64(10), 5, 0, int64(0), int64(0))
	f.Add("ana", "k1", ` { "b" : 1 , "a" : [ 1.50 , "\u00e9" ] } `, int64(1), 1, -100, ms(testEpoch), ms(testEpoch.Add(time.Hour)))
	f.Add("a.b_c-d@e", "order:1/line.2", `{}`, int64(CostBudgetMax), StepsMaxLimit, 100, ms(testEpoch), int64(0))
	f.Add("", "k", `{}`, int64(1), 1, 0, int64(0), int64(0))
	f.Add("ana", "k k", `{}`, int64(1), 1, 0, int64(0), int64(0))
	f.Add("ana", "k", `[]`, int64(1), 1, 0, int64(0), int64(0))
	f.Add("ana", "k", `{"a":1,"a":2}`, int64(1), 1, 0, int64(0), int64(0))
	f.Add("ana", "k", `{"a":1}}`, int64(1), 1, 0, int64(0), int64(0))
	f.Add("ana", "k", "{\"a\":\"\xff\"}", int64(1), 1, 0, int64(0), int64(0))
	f.Add("ana", "k", `{}`, int64(0), 0, 101, int64(-1), int64(1))
	f.Add("ana", "k", `{}`, int64(-1<<63), -1<<31, 1<<31-1, int64(-1<<63), int64(1<<63-1))
	f.Add("ana", "k", `{}`, int64(5), 5, 0, ms(testEpoch), ms(testEpoch))
	f.Fuzz(func(t *testing.T, user, key, payload string, cost int64, steps, priority int, runAtMs, deadlineMs int64) {
		r := SubmitRequest{User: user, Key: key, Payload: payload, CostBudget: cost, StepsMax: steps, Priority: priority}
		if runAtMs != 0 {
			r.RunAt = time.UnixMilli(runAtMs)
		}
		if deadlineMs != 0 {
			r.Deadline = time.UnixMilli(deadlineMs)
		}
		n, err := Normalize(r)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidInput)
			var ve *ValidationError
			require.ErrorAs(t, err, &ve)
			require.Contains(t, []string{"user", "key", "payload", "cost_budget", "steps_max", "priority", "run_at", "deadline"}, ve.Field)
			return
		}
		require.NoError(t, CheckName("user", n.User))
		require.LessOrEqual(t, len(n.Key), KeyLengthMax)
		require.True(t, n.CostBudget >= 1 && n.CostBudget <= CostBudgetMax)
		require.True(t, n.StepsMax >= 1 && n.StepsMax <= StepsMaxLimit)
		require.True(t, n.Priority >= PriorityMin && n.Priority <= PriorityMax)
		require.True(t, strings.HasPrefix(n.Payload, "{"))
		canon, err := CanonicalJSON([]byte(n.Payload))
		require.NoError(t, err)
		require.Equal(t, n.Payload, canon, "payload stored canonical")
		if !n.Deadline.IsZero() && !n.RunAt.IsZero() {
			require.True(t, n.Deadline.After(n.RunAt))
		}
		again, err := Normalize(n.SubmitRequest)
		require.NoError(t, err)
		require.Equal(t, n.Hash, again.Hash)
		require.Equal(t, n, again)
	})
}

// A stored failure message is cut at ErrorMessageMax bytes, back to a
// whole character: a multi-byte character at the bound is dropped, not
// split.
func TestTruncateMessageKeepsWholeCharacters(t *testing.T) {
	require.Equal(t, "short", TruncateMessage("short"))
	exact := strings.Repeat("x", ErrorMessageMax)
	require.Equal(t, exact, TruncateMessage(exact+"tail"))
	split := strings.Repeat("x", ErrorMessageMax-1) + "ü" + "tail" // ü's two bytes straddle the bound
	got := TruncateMessage(split)
	require.Equal(t, strings.Repeat("x", ErrorMessageMax-1), got)
	require.True(t, utf8.ValidString(got))
}

// Malformed payloads are refused by position, never by quoting what the
// payload holds.
func TestPayloadErrorsNeverQuoteThePayload(t *testing.T) {
	const secret = "4111-1111-SUPERSECRET"
	for _, p := range []string{
		`{"card":` + secret + `}`,
		`{"card":"` + secret + `","card":"` + secret + `"}`,
		`{"card":"` + secret + `"`,
		`{"card":"` + secret + `"}` + secret,
		`{"` + secret + `" 1}`,
	} {
		r := validRequest()
		r.Payload = p
		_, err := Normalize(r)
		require.ErrorIs(t, err, ErrInvalidInput, p)
		require.NotContains(t, err.Error(), "SUPERSECRET", p)
		require.NotContains(t, err.Error(), "'S'", p)
	}
}

// Refusals of a name quote the character as it reads, and a time outside
// the bounds states them exactly (both included).
func TestRefusalsStateWhatWasWrongExactly(t *testing.T) {
	for _, c := range []struct {
		edit func(*SubmitRequest)
		want string
	}{
		{func(r *SubmitRequest) { r.User = "jürgen" }, "user: character 'ü' at offset 1 is not allowed"},
		{func(r *SubmitRequest) { r.User = "a\x00b" }, "user: character U+0000 at offset 1 is not allowed"},
		{func(r *SubmitRequest) { r.Key = "k\xff" }, "key: byte 0xFF (not UTF-8) at offset 1 is not allowed"},
		{func(r *SubmitRequest) { r.RunAt = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC) },
			"run_at: must be from 2000-01-01T00:00:00Z to 9999-12-31T00:00:00Z inclusive, got 9999-12-31T23:59:59Z"},
		{func(r *SubmitRequest) { r.Deadline = time.Date(1999, 12, 31, 23, 59, 59, 0, time.UTC) },
			"deadline: must be from 2000-01-01T00:00:00Z to 9999-12-31T00:00:00Z inclusive, got 1999-12-31T23:59:59Z"},
	} {
		r := validRequest()
		c.edit(&r)
		_, err := Normalize(r)
		require.EqualError(t, err, c.want)
	}
	// The bounds themselves are accepted.
	for _, at := range []time.Time{timeMin, timeMax} {
		r := validRequest()
		r.RunAt = at
		_, err := Normalize(r)
		require.NoError(t, err, "%s", at)
	}
}

// TestCheckNameRefusesDotSegments: "." and ".." are refused wherever a
// name is checked (users, actors, workers), with the field named; names
// that merely hold dots are not.
func TestCheckNameRefusesDotSegments(t *testing.T) {
	for _, name := range []string{".", ".."} {
		for _, field := range []string{"user", "actor", "worker"} {
			err := CheckName(field, name)
			var ve *ValidationError
			require.ErrorAs(t, err, &ve, "%s %q", field, name)
			require.Equal(t, field, ve.Field)
			require.Contains(t, ve.Problem, "path segment")
		}
		_, err := Normalize(SubmitRequest{User: name, Key: "k", Payload: "{}", CostBudget: 1, StepsMax: 1})
		require.ErrorIs(t, err, ErrInvalidInput)
		require.Equal(t, "user: \""+name+"\" is a path segment of its own (. and .. are not names)", err.Error())
	}
	for _, name := range []string{"...", ".a", "a.", "a..b", "a.b"} {
		require.NoError(t, CheckName("user", name))
	}
}

// NormalizeWith hashes a request as sent and only then fills the cost
// budget and step limit it names none of from its kind's defaults: a
// request that names them hashes and normalizes the same with defaults
// or without; one that names neither takes the defaults, hashes as sent
// (so it is not the request that names the same values), and is refused
// where there are none; a default never replaces a value named, even a
// refused one.
func TestNormalizeWithDefaults(t *testing.T) {
	defaults := map[string]RequestDefaults{"report": {CostBudget: 7, StepsMax: 3}, KindSynthetic: {StepsMax: 2}}
	named := validRequest()
	named.Kind = "report"
	plain, err := Normalize(named)
	require.NoError(t, err)
	with, err := NormalizeWith(named, defaults)
	require.NoError(t, err)
	require.Equal(t, plain, with, "a request naming its budget and limit is untouched by defaults")

	bare := named
	bare.CostBudget, bare.StepsMax = 0, 0
	_, err = Normalize(bare)
	require.ErrorIs(t, err, ErrInvalidInput)
	require.ErrorContains(t, err, "cost_budget")
	filled, err := NormalizeWith(bare, defaults)
	require.NoError(t, err)
	require.Equal(t, int64(7), filled.CostBudget)
	require.Equal(t, 3, filled.StepsMax)
	require.Equal(t, requestHash(SubmitRequest{User: "ana", Key: "k1", Kind: "report", Payload: `{"steps":[{"cost":1}]}`}), filled.Hash,
		"hashed as sent: budget and limit zero")
	require.NotEqual(t, with.Hash, filled.Hash, "a request naming 7 and 3 is another request than one naming none")

	other, err := NormalizeWith(bare, map[string]RequestDefaults{"report": {CostBudget: 20, StepsMax: 9}})
	require.NoError(t, err)
	require.Equal(t, filled.Hash, other.Hash, "the hash does not depend on the defaults")
	require.Equal(t, int64(20), other.CostBudget)

	half := bare
	half.StepsMax = 4
	n, err := NormalizeWith(half, defaults)
	require.NoError(t, err)
	require.Equal(t, int64(7), n.CostBudget)
	require.Equal(t, 4, n.StepsMax, "a limit named is kept")

	synthetic := validRequest()
	synthetic.StepsMax = 0
	n, err = NormalizeWith(synthetic, defaults)
	require.NoError(t, err, "the empty kind is synthetic and takes its defaults")
	require.Equal(t, 2, n.StepsMax)
	synthetic.CostBudget = 0
	_, err = NormalizeWith(synthetic, defaults)
	require.ErrorContains(t, err, "cost_budget", "a default the kind does not give fills nothing")

	negative := bare
	negative.CostBudget = -1
	_, err = NormalizeWith(negative, defaults)
	require.ErrorContains(t, err, "cost_budget: must be between 1", "a refused value is not replaced")
}

// A schedule's spec takes its kind's defaults where it names none.
func TestScheduleSpecWithDefaults(t *testing.T) {
	spec := ScheduleSpec{User: "ana", Kind: "report", Payload: `{}`, Origin: testEpoch, Period: time.Hour}
	_, err := spec.Validate()
	require.ErrorContains(t, err, "cost_budget")
	filled := spec.WithDefaults(map[string]RequestDefaults{"report": {CostBudget: 5, StepsMax: 1}})
	require.Equal(t, int64(5), filled.CostBudget)
	require.Equal(t, 1, filled.StepsMax)
	_, err = filled.Validate()
	require.NoError(t, err)
	spec.CostBudget = 9
	require.Equal(t, int64(9), spec.WithDefaults(map[string]RequestDefaults{"report": {CostBudget: 5, StepsMax: 1}}).CostBudget)
}

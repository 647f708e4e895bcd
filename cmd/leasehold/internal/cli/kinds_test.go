package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/wire"
)

// reportKindsFile is a kinds file with a schema for the report kind.
const reportKindsFile = `{"kinds": {"report": {"schema": {
  "type": "object", "required": ["month"], "additionalProperties": false,
  "properties": {"month": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}$"}}}}}}`

// TestSubmitWithKinds: submit --kind with --kinds FILE refuses a payload
// its kind's schema refuses (exit 2, naming the path inside the payload,
// never the value, nothing written) and stores a good one with its kind;
// list --kind lists it; schedule add is checked the same way; a kinds
// file that cannot be read is a usage error naming --kinds.
func TestSubmitWithKinds(t *testing.T) {
	f := newFixture(t)
	file := filepath.Join(t.TempDir(), "kinds.json")
	require.NoError(t, os.WriteFile(file, []byte(reportKindsFile), 0o600))
	submit := func(key, payload string, extra ...string) result {
		return f.do("submit", append([]string{"--user", "ana", "--key", key, "--kind", "report", "--payload", payload,
			"--cost-budget", "1", "--steps-max", "1"}, extra...)...)
	}
	before := snapshot(t, f.dir)
	r := submit("r1", `{"month":"March-SECRET"}`, "--kinds", file)
	requireUsage(t, r, "payload.month", "pattern")
	require.NotContains(t, r.stderr, "SECRET")
	r = submit("r1", `{}`, "--kinds", file)
	require.Equal(t, exitUsage, r.code, "%s", r)
	require.Contains(t, r.stderr, "payload")
	r = f.lh([]string{"schedule", "add"}, "--user", "ana", "--kind", "report", "--payload", `{"month":"x"}`, "--cost-budget", "1",
		"--steps-max", "1", "--origin", "2030-01-01T00:00:00Z", "--period", "1h", "--actor", "ops", "--kinds", file)
	require.Equal(t, exitUsage, r.code, "%s", r)
	require.Contains(t, r.stderr, "payload.month")
	require.Equal(t, before, snapshot(t, f.dir), "a refused payload changed the database's files")
	requireUsage(t, submit("r1", `{"month":"2026-03"}`, "--kinds", filepath.Join(t.TempDir(), "missing.json")), "--kinds")

	r = submit("r1", `{"month":"2026-03"}`, "--kinds", file)
	requireOK(t, r)
	id := strings.TrimSpace(r.stdout)
	r = f.do("status", id, "--json")
	requireOK(t, r)
	var task map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &task))
	require.Equal(t, "report", task["kind"])
	r = f.do("list", "--kind", "report", "--json")
	requireOK(t, r)
	require.Contains(t, r.stdout, id)
	r = f.do("list", "--kind", "synthetic", "--json")
	requireOK(t, r)
	require.NotContains(t, r.stdout, id)
	requireUsage(t, f.do("list", "--kind", "Not A Kind"), "kind")
}

// TestUnknownKindWithKinds: with --kinds FILE, submit, submit --batch and
// schedule add refuse a kind the file does not name (exit 2, naming the
// kind, nothing written); the synthetic kind is still taken, and without
// --kinds any kind is.
func TestUnknownKindWithKinds(t *testing.T) {
	f := newFixture(t)
	file := filepath.Join(t.TempDir(), "kinds.json")
	require.NoError(t, os.WriteFile(file, []byte(reportKindsFile), 0o600))
	submit := func(key, kind string, extra ...string) result {
		return f.do("submit", append([]string{"--user", "ana", "--key", key, "--kind", kind, "--payload", `{"month":"2026-03"}`,
			"--cost-budget", "1", "--steps-max", "1"}, extra...)...)
	}
	before := snapshot(t, f.dir)
	requireUsage(t, submit("u1", "report2", "--kinds", file), "kind: report2 is not in the kinds file")
	batch := f.batchFile(`{"user":"ana","key":"u2","kind":"report","payload":{"month":"2026-03"},"cost_budget":1,"steps_max":1}`,
		`{"user":"ana","key":"u3","kind":"report2","payload":{"month":"2026-03"},"cost_budget":1,"steps_max":1}`)
	requireUsage(t, f.do("submit", "--batch", batch, "--kinds", file), "report2 is not in the kinds file")
	r := f.lh([]string{"schedule", "add"}, "--user", "ana", "--kind", "report2", "--payload", `{"month":"2026-03"}`, "--cost-budget", "1",
		"--steps-max", "1", "--origin", "2030-01-01T00:00:00Z", "--period", "1h", "--actor", "ops", "--kinds", file)
	requireUsage(t, r, "kind: report2 is not in the kinds file")
	require.Equal(t, before, snapshot(t, f.dir), "a refused kind changed the database's files")

	requireOK(t, submit("u4", "report", "--kinds", file))
	requireOK(t, f.do("submit", "--user", "ana", "--key", "u5", "--payload", `{"steps":[{"cost":1}]}`,
		"--cost-budget", "1", "--steps-max", "1", "--kinds", file))
	requireOK(t, submit("u6", "report2"))
}

// TestSubmitTakesTheKindsDefaults: with --kinds FILE whose kind gives a
// budget and a step limit, submit, submit --batch and schedule add take
// them where the request names none; the same submit again is an exact
// replay (the request is hashed as sent), and without the file the
// request naming none is refused (exit 2, naming cost_budget).
func TestSubmitTakesTheKindsDefaults(t *testing.T) {
	f := newFixture(t)
	file := filepath.Join(t.TempDir(), "kinds.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"kinds": {"report": {"defaults": {"budget": 7, "steps_max": 3}}}}`), 0o600))
	submit := func(key string, extra ...string) result {
		return f.do("submit", append([]string{"--user", "ana", "--key", key, "--kind", "report", "--payload", `{"month":"2026-03"}`,
			"--json"}, extra...)...)
	}
	requireUsage(t, submit("d1"), "cost_budget")
	r := submit("d1", "--kinds", file)
	requireOK(t, r)
	var res struct {
		TaskID string `json:"task_id"`
		Replay bool   `json:"replay"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
	require.False(t, res.Replay)
	first := res.TaskID
	r = submit("d1", "--kinds", file)
	requireOK(t, r)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
	require.Equal(t, first, res.TaskID)
	require.True(t, res.Replay, "the request as sent is an exact replay")

	r = f.do("status", first, "--json")
	requireOK(t, r)
	var task map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &task))
	require.EqualValues(t, 7, task["cost_budget"])
	require.EqualValues(t, 3, task["steps_max"])

	batch := f.batchFile(`{"user":"ana","key":"d2","kind":"report","payload":{"month":"2026-03"},"steps_max":1}`)
	requireOK(t, f.do("submit", "--batch", batch, "--kinds", file))
	r = f.do("list", "--kind", "report", "--json")
	requireOK(t, r)
	require.Contains(t, r.stdout, `"steps_max":1`)

	r = f.lh([]string{"schedule", "add"}, "--user", "ana", "--kind", "report", "--payload", `{"month":"2026-03"}`,
		"--origin", "2030-01-01T00:00:00Z", "--period", "1h", "--actor", "ops", "--kinds", file)
	requireOK(t, r)
	r = f.lh([]string{"schedule", "list"}, "--json")
	requireOK(t, r)
	require.Contains(t, r.stdout, `"cost_budget":7`)
}

// TestMetricsByKind: metrics and metrics --json count the outcomes by
// kind, bounded as /metrics is: the kinds file's kinds and synthetic by
// name (zeros included), every other kind as other, never named; each
// total is its sum over kind. A kinds file that cannot be read is a usage
// error naming --kinds, and nothing is printed.
func TestMetricsByKind(t *testing.T) {
	f := newFixture(t)
	file := filepath.Join(t.TempDir(), "kinds.json")
	require.NoError(t, os.WriteFile(file, []byte(reportKindsFile), 0o600))
	f.submit("ana", "r1", `{"month":"2026-03"}`, "--kind", "report")
	f.submit("ana", "r2", `{"month":"2026-04"}`, "--kind", "report")
	f.submit("ana", "s1", `{"any":"thing"}`, "--kind", "stray-kind")
	f.toCompleted("y1")

	metrics := func(args ...string) wire.Metrics {
		t.Helper()
		r := f.do("metrics", append([]string{"--json"}, args...)...)
		requireOK(t, r)
		var m wire.Metrics
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &m), r.stdout)
		require.NotContains(t, r.stdout, "stray", "a kind not named is never printed")
		return m
	}
	m := metrics("--kinds", file)
	require.Equal(t, map[string]wire.Counts{
		"report":            {Submitted: 2},
		model.KindSynthetic: {Submitted: 1, Completions: 1},
		wire.KindOther:      {Submitted: 1},
	}, m.ByKind)
	require.Equal(t, int64(4), m.Submitted)
	require.Equal(t, int64(1), m.Completions)
	m = metrics()
	require.Equal(t, map[string]wire.Counts{
		model.KindSynthetic: {Submitted: 1, Completions: 1},
		wire.KindOther:      {Submitted: 3},
	}, m.ByKind, "without --kinds: synthetic, and every other kind as other")

	r := f.do("metrics", "--kinds", file)
	requireOK(t, r)
	require.Contains(t, r.stdout, "submitted 4, completed 1")
	table := r.stdout[strings.Index(r.stdout, "by kind"):]
	lines := strings.Split(table, "\n")
	require.Regexp(t, `^  kind +submitted +completed +failed `, lines[1])
	require.Regexp(t, `^  report +2 +0 +0 `, lines[2])
	require.Regexp(t, `^  synthetic +1 +1 +0 `, lines[3])
	require.Regexp(t, `^  other +1 +0 +0 `, lines[4], "other last")
	require.NotContains(t, r.stdout, "stray")

	requireUsage(t, f.do("metrics", "--kinds", filepath.Join(t.TempDir(), "missing.json")), "--kinds")
}

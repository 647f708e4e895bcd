package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRepeatedJSONKeysRefused: a key repeated in one object of --payload
// (given inline or as @FILE) or of a --batch line, at any depth, exits 2
// naming the key's path and never a value, and nothing is written.
func TestRepeatedJSONKeysRefused(t *testing.T) {
	f := newFixture(t)
	f.submit("ana", "first", `{"steps":[{"cost":1}]}`) // the database exists, holding one task
	payload := `{"steps":[{"cost":1,"effect":"secret-charge","cost":2}]}`
	file := filepath.Join(t.TempDir(), "payload.json")
	require.NoError(t, os.WriteFile(file, []byte(payload), 0o600))
	for _, p := range []string{payload, "@" + file} {
		r := f.do("submit", "--user", "ana", "--key", "k1", "--payload", p, "--cost-budget", "10", "--steps-max", "5")
		requireUsage(t, r, "--payload", "key steps[0].cost appears twice in one object")
		require.NotContains(t, r.stderr, "secret-charge")
	}
	r := f.lh([]string{"schedule", "add"}, "--user", "ana", "--payload", payload, "--cost-budget", "10", "--steps-max", "5", "--period", "1h")
	requireUsage(t, r, "--payload", "key steps[0].cost appears twice in one object")

	batch := f.batchFile(batchLineFor("ana", "b1", 5),
		`{"user":"ana","key":"b2","payload":{"steps":[]},"cost_budget":5,"steps_max":3,"user":"other"}`)
	r = f.do("submit", "--batch", batch)
	requireUsage(t, r, "line 2", "key user appears twice in one object")
	require.NotContains(t, r.stderr, "other")

	r = f.do("list", "--json")
	requireOK(t, r)
	var list struct {
		Tasks []map[string]any `json:"tasks"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list), r.stdout)
	require.Len(t, list.Tasks, 1, "only the first task was stored: %s", r.stdout)
	r = f.lh([]string{"schedule", "list"}, "--json")
	requireOK(t, r)
	require.NotContains(t, r.stdout, "ana", "no schedule was added")
}

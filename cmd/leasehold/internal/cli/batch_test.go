package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/queue"
)

// batchFile writes lines into a file of a directory of its own.
func (f *fixture) batchFile(lines ...string) string {
	f.t.Helper()
	path := filepath.Join(f.t.TempDir(), "batch.jsonl")
	require.NoError(f.t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	return path
}

func batchLineFor(user, key string, budget int) string {
	return fmt.Sprintf(`{"user":%q,"key":%q,"payload":{"steps":[{"cost":1}]},"cost_budget":%d,"steps_max":3}`, user, key, budget)
}

// submit --batch stores every line in one transaction and prints the IDs
// in order; a replayed file returns the same IDs marked replay; standard
// input works as a file.
func TestSubmitBatch(t *testing.T) {
	f := newFixture(t)
	file := f.batchFile(batchLineFor("ana", "k1", 5), "", batchLineFor("bob", "k1", 5), batchLineFor("ana", "k2", 5))
	r := f.do("submit", "--batch", file)
	requireOK(t, r)
	ids := strings.Fields(r.stdout)
	require.Len(t, ids, 3)
	for _, id := range ids {
		requireOK(t, f.do("status", id))
	}

	batchStdin = strings.NewReader(batchLineFor("ana", "k1", 5) + "\n" + batchLineFor("ana", "k3", 5) + "\n")
	defer func() { batchStdin = os.Stdin }()
	r = f.do("submit", "--batch", "-", "--json")
	requireOK(t, r)
	var records []struct {
		TaskID string `json:"task_id"`
		Replay bool   `json:"replay"`
	}
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var rec struct {
			TaskID string `json:"task_id"`
			Replay bool   `json:"replay"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &rec))
		records = append(records, rec)
	}
	require.Len(t, records, 2)
	require.Equal(t, ids[0], records[0].TaskID)
	require.True(t, records[0].Replay)
	require.False(t, records[1].Replay)
}

// A bad batch is refused naming its line, exit 2 (or 1 for a conflict
// with a stored task), and writes nothing.
func TestSubmitBatchRefusals(t *testing.T) {
	f := newFixture(t)
	requireOK(t, f.do("submit", "--batch", f.batchFile(batchLineFor("ana", "k1", 5))))
	before := snapshot(t, f.dir)
	var long []string
	for i := range queue.SubmitBatchMax + 1 {
		long = append(long, batchLineFor("ana", fmt.Sprintf("x%d", i), 1))
	}
	for _, c := range []struct {
		name  string
		lines []string
		args  []string
		code  int
		want  []string
	}{
		{"bad budget", []string{batchLineFor("ana", "k2", 5), batchLineFor("ana", "k3", 0)}, nil, exitUsage, []string{"line 2", "cost_budget"}},
		{"unknown field", []string{`{"user":"ana","bogus":1}`}, nil, exitUsage, []string{"line 1", "bogus"}},
		{"not JSON", []string{`user=ana`}, nil, exitUsage, []string{"line 1", "JSON"}},
		{"too many", long, nil, exitUsage, []string{fmt.Sprint(queue.SubmitBatchMax), "SubmitBatchMax"}},
		{"with request flags", []string{batchLineFor("ana", "k2", 5)}, []string{"--user", "ana"}, exitUsage, []string{"--batch", "--user"}},
		{"conflict", []string{batchLineFor("ana", "k2", 5), batchLineFor("ana", "k1", 6)}, nil, exitFail, []string{"line 2", "idempotency"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := f.batchFile(c.lines...)
			r := f.do("submit", append([]string{"--batch", file}, c.args...)...)
			require.Equal(t, c.code, r.code, "%s", r)
			requireOneLine(t, r, c.want...)
			require.Equal(t, before, snapshot(t, f.dir), "a refused batch writes nothing")
		})
	}
	r := f.do("submit", "--batch", filepath.Join(f.dir, "missing.jsonl"))
	requireUsage(t, r, "--batch", "missing.jsonl")
}

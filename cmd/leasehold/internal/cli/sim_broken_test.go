//go:build leasehold_broken

package cli

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/evidence"
)

// sim --json --shrink puts the shrunk schedule into the failed seed's
// record, the same as its text; replaying the kept events with --trace
// puts the trace into the record and still breaks the same thing. The
// evidence builder reads exactly these fields.
//
//	go test -tags leasehold_broken -run SimBroken ./cmd/leasehold/internal/cli
func TestSimBrokenShrinkRecord(t *testing.T) {
	t.Setenv("LEASEHOLD_BROKEN", "step-cas-skipped")
	args := []string{"sim", "--scenario", "portfolio", "--seed", "1", "--shrink"}
	r := lh(t, append(args, "--json")...)
	require.Equal(t, exitFail, r.code, r.String())
	recs, sums, err := evidence.ReadRecords([]byte(r.stdout))
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Len(t, sums, 1)
	require.False(t, sums[0].Pass)
	rec := recs[0]
	require.False(t, rec.Pass)
	require.NotNil(t, rec.Shrunk)
	s := rec.Shrunk
	require.Equal(t, rec.Broken, s.Broken)
	require.NotEmpty(t, s.Keep)
	require.Len(t, s.Events, len(s.Keep))
	require.Less(t, len(s.Keep), s.Of)
	require.Equal(t, "leasehold sim --scenario portfolio --seed 1 --events "+joinInts(s.Keep), s.Replay)

	text := lh(t, args...)
	require.Equal(t, exitFail, text.code)
	require.Contains(t, text.stdout, "replay: "+s.Replay+"\n", "the text says what the record says")

	replay := lh(t, "sim", "--scenario", "portfolio", "--seed", "1", "--events", joinInts(s.Keep), "--trace", "--json")
	require.Equal(t, exitFail, replay.code, replay.String())
	recs, _, err = evidence.ReadRecords([]byte(replay.stdout))
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, s.Broken, recs[0].Broken)
	require.NotEmpty(t, recs[0].Trace)
	require.True(t, strings.HasPrefix(recs[0].Trace[len(recs[0].Trace)-1], "VIOLATION "), recs[0].Trace[len(recs[0].Trace)-1])
}

// The evidence report's failed attempt is assembled from the broken
// build's records: the seed that failed, its shrunk schedule and replay,
// the trace of the replay, and the same seeds passing without the variant.
// This test binary is the broken build (it runs as leasehold under
// asBinary).
func TestSimBrokenFailedAttemptFromRecords(t *testing.T) {
	t.Setenv(asBinary, "1")
	self, err := os.Executable()
	require.NoError(t, err)
	in, err := failedAttempt(self, 200)
	require.NoError(t, err)
	a, err := evidence.FailedAttempt(in)
	require.NoError(t, err)
	require.NotZero(t, a.Seed)
	require.Equal(t, int(a.Seed), a.SeedsRun, "the search stops at the first failed seed")
	require.NotEmpty(t, a.Detail)
	require.NotEmpty(t, a.Invariant)
	require.NotEmpty(t, a.Shrunk)
	require.Contains(t, a.Replay, "LEASEHOLD_BROKEN="+evidence.FailedVariant+" bin/leasehold-broken sim --scenario "+evidence.FailedScenario)
	require.NotEmpty(t, a.Trace)
	require.NotNil(t, a.Timeline)
	require.True(t, a.FixedPass, a.FixedRun)
	require.Contains(t, a.FixedRun, fmt.Sprintf("%d passed, 0 failed", a.Seed))
}

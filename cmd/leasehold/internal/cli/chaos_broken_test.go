//go:build leasehold_broken

package cli

// The live checker catches a broken worker: with no-budget-check the
// worker starts a step its budget cannot pay for, makes that step's
// effect, and only then has the step refused by the queue. The task ends
// budget_exhausted, as it should, but the service's ledger shows the
// effect: the checker counts it as overspent and the run fails.
//
//	go test -tags leasehold_broken -run ChaosBroken ./cmd/leasehold

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/chaos"
)

func TestChaosBrokenNoBudgetCheckIsCaught(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	t.Setenv("LEASEHOLD_DATA_DIR", root)
	t.Setenv(asBinary, "1")
	t.Setenv("LEASEHOLD_BROKEN", "no-budget-check")
	dir := filepath.Join(root, "chaos")
	ctx, cancel := context.WithTimeout(context.Background(), shortChaosMax)
	defer cancel()
	var out, errOut bytes.Buffer
	code := run(&env{ctx: ctx, stdout: &out, stderr: &errOut}, []string{"chaos", "--kills", "2", "--stops", "0", "--tasks", "40",
		"--seed", "5", "--out", dir})
	require.Equal(t, exitFail, code, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	require.Contains(t, out.String(), "chaos INVALID")
	res, err := chaos.ReadResult(filepath.Join(dir, "result.json"))
	require.NoError(t, err)
	require.False(t, res.Pass)
	require.Positive(t, res.Findings.Overspent, "%+v", res.Findings)
	require.Contains(t, res.Findings.Details[0], "budget_exhausted")
	require.Zero(t, res.Findings.Lost+res.Findings.Duplicated+res.Findings.Unexpected+res.Findings.StaleAccepted)
}

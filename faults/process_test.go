package faults_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/faults"
)

func requireState(t *testing.T, p *faults.Process, want faults.ProcessState) {
	t.Helper()
	require.Equal(t, want, p.State())
	require.Equal(t, want == faults.ProcessRunning, p.Runnable())
	require.Equal(t, want == faults.ProcessStalled, p.Stalled())
	require.Equal(t, want == faults.ProcessCrashed, p.Crashed())
}

func TestProcessLifecycle(t *testing.T) {
	p := faults.NewProcess("w1")
	require.Equal(t, "w1", p.Name())
	requireState(t, p, faults.ProcessRunning)
	require.Zero(t, p.Generation())

	require.NoError(t, p.Stall())
	requireState(t, p, faults.ProcessStalled)
	require.NoError(t, p.Resume())
	requireState(t, p, faults.ProcessRunning)
	require.Zero(t, p.Generation(), "a stall keeps the process")

	require.NoError(t, p.Crash())
	requireState(t, p, faults.ProcessCrashed)
	require.NoError(t, p.Restart())
	requireState(t, p, faults.ProcessRunning)
	require.Equal(t, 1, p.Generation())

	require.NoError(t, p.Stall())
	require.NoError(t, p.Crash(), "a stalled process can crash")
	requireState(t, p, faults.ProcessCrashed)
	require.NoError(t, p.Restart())
	require.Equal(t, 2, p.Generation())
	require.Equal(t, "process w1: running generation=2 crashes=2 stalls=2", p.String())
}

func TestProcessRefusesInvalidTransitions(t *testing.T) {
	type step func(p *faults.Process) error
	crash := func(p *faults.Process) error { return p.Crash() }
	restart := func(p *faults.Process) error { return p.Restart() }
	stall := func(p *faults.Process) error { return p.Stall() }
	resume := func(p *faults.Process) error { return p.Resume() }
	cases := []struct {
		name   string
		reach  []step
		state  faults.ProcessState
		refuse step
		msg    string
	}{
		{"restart running", nil, faults.ProcessRunning, restart, "process w1: cannot restart while running"},
		{"resume running", nil, faults.ProcessRunning, resume, "cannot resume while running"},
		{"stall stalled", []step{stall}, faults.ProcessStalled, stall, "cannot stall while stalled"},
		{"restart stalled", []step{stall}, faults.ProcessStalled, restart, "cannot restart while stalled"},
		{"stall crashed", []step{crash}, faults.ProcessCrashed, stall, "cannot stall while crashed"},
		{"resume crashed", []step{crash}, faults.ProcessCrashed, resume, "cannot resume while crashed"},
		{"crash crashed", []step{crash}, faults.ProcessCrashed, crash, "cannot crash while crashed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := faults.NewProcess("w1")
			for _, s := range c.reach {
				require.NoError(t, s(p))
			}
			before := p.String()
			err := c.refuse(p)
			require.ErrorIs(t, err, faults.ErrProcessState)
			require.NotErrorIs(t, err, faults.ErrInjected)
			require.ErrorContains(t, err, c.msg)
			requireState(t, p, c.state)
			require.Equal(t, before, p.String(), "a refused transition changes nothing")
		})
	}
}

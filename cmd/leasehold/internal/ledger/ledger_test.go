package ledger

// The ledger behaves as its kind on a real SQLite file, logs every call it
// answers, counts a second application where its kind allows one (that is
// what the chaos checker looks for), and Hold really takes its write lock.

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/worker"
)

func open(t *testing.T, kind worker.ServiceKind) (*Service, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "service.db")
	s, err := Open(path, kind)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s, path
}

func outcomes(t *testing.T, s *Service) []string {
	t.Helper()
	calls, err := s.Calls()
	require.NoError(t, err)
	var out []string
	for _, c := range calls {
		out = append(out, fmt.Sprintf("%s@%d %s", c.OpID, c.Fence, c.Outcome))
	}
	return out
}

func TestKindsApplyAndLogEveryCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	call := func(fence int64) worker.Call {
		return worker.Call{OpID: "t_1.s1", TaskID: "t_1", Effect: "charge", Fence: fence}
	}

	dedup, _ := open(t, worker.Dedup)
	_, err := dedup.Call(ctx, call(1))
	require.NoError(t, err)
	_, err = dedup.Call(ctx, call(2))
	require.NoError(t, err)
	applied, err := dedup.Applications()
	require.NoError(t, err)
	require.Equal(t, map[string]int{"t_1.s1": 1}, applied)
	require.Equal(t, []string{"t_1.s1@1 applied", "t_1.s1@2 deduplicated"}, outcomes(t, dedup))

	fenced, _ := open(t, worker.Fenced)
	ok, _, err := fenced.Status(ctx, "t_1.s1", 3)
	require.NoError(t, err)
	require.False(t, ok)
	_, err = fenced.Call(ctx, call(2))
	require.ErrorIs(t, err, worker.ErrStaleFence)
	_, err = fenced.Call(ctx, call(3))
	require.NoError(t, err)
	applied, err = fenced.Applications()
	require.NoError(t, err)
	require.Equal(t, map[string]int{"t_1.s1": 1}, applied)
	require.Equal(t, []string{"t_1.s1@2 refused_stale_fence", "t_1.s1@3 applied"}, outcomes(t, fenced))

	// A plain service applies whatever it is asked to: the ledger counts
	// the second application.
	plain, _ := open(t, worker.Plain)
	for _, f := range []int64{1, 2} {
		_, err = plain.Call(ctx, call(f))
		require.NoError(t, err)
	}
	applied, err = plain.Applications()
	require.NoError(t, err)
	require.Equal(t, map[string]int{"t_1.s1": 2}, applied)
	_, _, err = plain.Status(ctx, "t_1.s1", 2)
	require.ErrorIs(t, err, worker.ErrNoStatus)
}

// While Hold holds, no other connection can take the ledger's write lock;
// after release it can.
func TestHoldTakesTheWriteLock(t *testing.T) {
	t.Parallel()
	s, path := open(t, worker.Queryable)
	other, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(0)")
	require.NoError(t, err)
	defer other.Close()
	other.SetMaxOpenConns(1)
	tryLock := func() error {
		_, err := other.Exec("BEGIN IMMEDIATE")
		if err == nil {
			_, err = other.Exec("ROLLBACK")
		}
		return err
	}
	require.NoError(t, tryLock())
	release, err := s.Hold(context.Background())
	require.NoError(t, err)
	require.ErrorContains(t, tryLock(), "locked")
	require.NoError(t, release())
	require.NoError(t, release(), "a second release does nothing")
	require.NoError(t, tryLock())
}

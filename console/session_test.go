package console

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

func TestSessionsAreBounded(t *testing.T) {
	clock := clockwork.NewFakeClockAt(epoch)
	s := newSessions(clock, rand.NewChaCha8([32]byte{2}), time.Hour, 2*time.Hour)
	first, _, err := s.create(nil)
	require.NoError(t, err)
	for range SessionsMax - 1 {
		clock.Advance(time.Millisecond)
		_, _, err := s.create(nil)
		require.NoError(t, err)
	}
	require.Equal(t, SessionsMax, s.count())

	// Full of anonymous sessions: a sign-in evicts the one seen longest ago.
	p := &Principal{Name: "ana"}
	signedIn, _, err := s.create(p)
	require.NoError(t, err)
	require.Equal(t, SessionsMax, s.count())
	_, ok := s.get(first)
	require.False(t, ok, "the oldest anonymous session made room")
	got, ok := s.get(signedIn)
	require.True(t, ok)
	require.Equal(t, "ana", got.principal.Name)

	// Signed-in sessions are never evicted: a full table of them refuses.
	s = newSessions(clock, rand.NewChaCha8([32]byte{3}), time.Hour, 2*time.Hour)
	for range SessionsMax {
		_, _, err := s.create(p)
		require.NoError(t, err)
	}
	_, _, err = s.create(nil)
	require.ErrorIs(t, err, ErrTooManySessions)

	// Expired ones are swept to make room.
	clock.Advance(time.Hour)
	_, _, err = s.create(nil)
	require.NoError(t, err)
	require.Equal(t, 1, s.count())
}

func TestSessionIDsAreFreshAndUnguessable(t *testing.T) {
	clock := clockwork.NewFakeClockAt(epoch)
	s := newSessions(clock, rand.NewChaCha8([32]byte{4}), time.Hour, 2*time.Hour)
	a, sa, err := s.create(nil)
	require.NoError(t, err)
	b, sb, err := s.create(nil)
	require.NoError(t, err)
	require.NotEqual(t, a, b)
	require.NotEqual(t, sa.csrf, sb.csrf)
	require.NotEqual(t, a, sa.csrf, "the CSRF token is not the session ID")
	require.Len(t, a, 43, "32 random bytes, base64")
	_, ok := s.get(a[:42] + "x")
	require.False(t, ok)
	_, ok = s.get("")
	require.False(t, ok)

	// An anonymous session lives at most anonymousLifetime.
	clock.Advance(anonymousLifetime)
	_, ok = s.get(a)
	require.False(t, ok)
}

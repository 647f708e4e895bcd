package redact

import (
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestURLAndPasswords: a URL's user-information password and its
// password= settings are replaced in the URL and in any message that
// repeats them; a URL without one is left as it is.
func TestURLAndPasswords(t *testing.T) {
	const u = "postgres://ana:s3cret@db:5432/q?sslmode=disable&password=other"
	require.Equal(t, "postgres://ana:xxxxx@db:5432/q?sslmode=disable&password=xxxxx", URL(u))
	require.Equal(t, "failed for xxxxx and xxxxx", Passwords("failed for s3cret and other", u))
	require.Equal(t, "postgres://db/q", URL("postgres://db/q"))
	require.Equal(t, "ana:s3cret", Userinfo(u))
}

// TestError: an error's message loses the URL's password and the error
// still unwraps to the original; one without it is returned as it is.
func TestError(t *testing.T) {
	const u = "postgres://ana:s3cret@db/q"
	err := Error(errors.Join(io.ErrUnexpectedEOF, errors.New("dial ana:s3cret")), u)
	require.NotContains(t, err.Error(), "s3cret")
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	plain := errors.New("no password here")
	require.Same(t, plain, Error(plain, u))
}

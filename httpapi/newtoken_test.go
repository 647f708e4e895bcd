package httpapi

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// TestNewTokenMakesTokensInCode: a token made with NewToken authenticates
// as its name with its scopes and users, as the same line read by
// ParseTokens would; NewToken refuses what ParseTokens refuses, and a
// token without users, naming the token and never quoting the secret.
func TestNewTokenMakesTokensInCode(t *testing.T) {
	const secret = "clerk-secret-0123456789"
	clerk, err := NewToken("clerk", secret, []string{model.ScopeSubmit}, []string{"globex", "acme"})
	require.NoError(t, err)
	parsed, err := ParseTokens("clerk submit "+secret+" acme,globex", true)
	require.NoError(t, err)
	require.Equal(t, parsed[0], clerk, "the same token as its line")
	require.Equal(t, Principal{Name: "clerk", Scopes: []string{model.ScopeSubmit}, Users: []string{"acme", "globex"}}, clerk.Principal())
	everyone, err := NewToken("manager", "manager-secret-0123456789", []string{model.ScopeSubmit, model.ScopeOperate}, []string{AllUsers})
	require.NoError(t, err)
	require.True(t, everyone.Principal().AllUsers())
	require.False(t, everyone.ImplicitUsers(), "its users were named")

	bad := map[string]struct {
		name, secret  string
		scopes, users []string
		want          string
	}{
		"unknown scope": {"clerk", secret, []string{"admin"}, []string{"acme"}, `token "clerk": unknown scope "admin"`},
		"no scopes":     {"clerk", secret, nil, []string{"acme"}, "no scopes"},
		"short secret":  {"clerk", "tiny-secret", []string{model.ScopeSubmit}, []string{"acme"}, "shorter than 16"},
		"no users":      {"clerk", secret, []string{model.ScopeSubmit}, nil, "no users"},
		"bad user":      {"clerk", secret, []string{model.ScopeSubmit}, []string{"ac/me"}, "users: user"},
		"star and user": {"clerk", secret, []string{model.ScopeSubmit}, []string{"acme", AllUsers}, "stands alone"},
		"bad name":      {"cl/erk", secret, []string{model.ScopeSubmit}, []string{"acme"}, "token name"},
	}
	for name, tc := range bad {
		t.Run(name, func(t *testing.T) {
			_, err := NewToken(tc.name, tc.secret, tc.scopes, tc.users)
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), tc.secret, "an error never repeats a secret")
		})
	}
}

// TestNewRefusesTokensThatClash: New refuses two tokens of one name or
// one secret (a shared secret would authenticate as neither), and a
// zero Token, naming the token and never the secret.
func TestNewRefusesTokensThatClash(t *testing.T) {
	q, err := queue.Open(context.Background(), queue.Options{Path: filepath.Join(t.TempDir(), "n.db"),
		Clock: clockwork.NewFakeClockAt(apiEpoch), IDs: model.NewSeededIDs(5)})
	require.NoError(t, err)
	defer q.Close()
	token := func(name, secret string) Token {
		t.Helper()
		tok, err := NewToken(name, secret, []string{model.ScopeSubmit}, []string{"acme"})
		require.NoError(t, err)
		return tok
	}
	a, b := token("clerk", "first-secret-0123456789"), token("auditor", "second-secret-0123456789")
	_, err = New(Options{Queue: q, Tokens: []Token{a, b}})
	require.NoError(t, err)
	for name, tokens := range map[string][]Token{
		"one name":   {a, token("clerk", "third-secret-0123456789")},
		"one secret": {a, token("auditor", "first-secret-0123456789")},
	} {
		_, err := New(Options{Queue: q, Tokens: tokens})
		require.ErrorContains(t, err, "shares its name or its secret", name)
		require.NotContains(t, err.Error(), "secret-0123456789", name)
	}
	_, err = New(Options{Queue: q, Tokens: []Token{a, {}}})
	require.ErrorContains(t, err, "Options.Tokens[1] is not a token")
}

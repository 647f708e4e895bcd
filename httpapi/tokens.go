package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/model"
)

// AllUsers in a token's USERS field (or a line without one) lets the
// token act for every user.
const AllUsers = "*"

// Token is one credential: who it is (the actor in audit events), what
// it may do and for which users. The secret is kept only as its SHA-256.
type Token struct {
	name   string
	scopes map[string]bool
	users  []string // sorted; [AllUsers] for every user
	// implicit is set for a line without USERS, which means every user.
	implicit bool
	digest   [32]byte
}

// Name is the token's name, the actor its actions are recorded under.
func (t Token) Name() string { return t.name }

// ImplicitUsers reports whether the token's line named no users, so it
// acts for every user by default (serve warns; --strict-tokens refuses).
func (t Token) ImplicitUsers() bool { return t.implicit }

// Principal is the token's authority: its name, scopes and users.
func (t Token) Principal() Principal {
	var scopes []string
	for _, s := range []string{model.ScopeSubmit, model.ScopeApprove, model.ScopeOperate} {
		if t.scopes[s] {
			scopes = append(scopes, s)
		}
	}
	return Principal{Name: t.name, Scopes: scopes, Users: slices.Clone(t.users)}
}

// ParseTokens reads "NAME SCOPE[,SCOPE...] SECRET USER[,USER...]" lines
// ('#' comments; USERS "*" for every user). Names must be valid actor
// names, scopes known, secrets at least 16 characters, users valid user
// IDs, and no two tokens may share a name or a secret. A line of three
// fields (no USERS) means every user, unless strict, when it is refused.
func ParseTokens(text string, strict bool) ([]Token, error) {
	var out []Token
	names, secrets := map[string]bool{}, map[[32]byte]bool{}
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		t, err := parseToken(strings.Fields(line), strict)
		if err != nil {
			return nil, fmt.Errorf("tokens line %d: %w", i+1, err)
		}
		if names[t.name] || secrets[t.digest] {
			return nil, fmt.Errorf("tokens line %d: token name or secret used twice", i+1)
		}
		names[t.name], secrets[t.digest] = true, true
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, errors.New("no tokens configured")
	}
	return out, nil
}

// parseToken reads one line's fields. Its errors never quote the secret.
func parseToken(fields []string, strict bool) (Token, error) {
	switch {
	case len(fields) == 3 && strict:
		return Token{}, errors.New("no USERS field (want NAME SCOPES SECRET USERS; --strict-tokens refuses a line without USERS)")
	case len(fields) != 3 && len(fields) != 4:
		return Token{}, errors.New("want NAME SCOPES SECRET USERS")
	}
	t, err := newToken(fields[0], fields[2], strings.Split(fields[1], ","))
	if err != nil {
		return Token{}, err
	}
	if len(fields) == 3 {
		t.users, t.implicit = []string{AllUsers}, true
		return t, nil
	}
	if t.users, err = parseUsers(fields[3]); err != nil {
		return Token{}, err
	}
	return t, nil
}

// NewToken returns a token made in code rather than read from lines
// (ParseTokens): named name (the actor its actions are recorded under),
// presenting secret, holding scopes (model.ScopeSubmit, ScopeApprove,
// ScopeOperate) and acting for users, or for every user when users is
// []string{AllUsers}. The rules are ParseTokens': a valid actor name,
// known scopes, a secret of at least 16 characters, valid user IDs, at
// least one scope and one user. Its errors name the token and never
// quote the secret. New refuses two tokens that share a name or a
// secret.
func NewToken(name, secret string, scopes, users []string) (Token, error) {
	t, err := newToken(name, secret, scopes)
	if err == nil && len(users) == 0 {
		err = errors.New("no users (name them, or AllUsers for every user)")
	}
	if err == nil {
		t.users, err = parseUsers(strings.Join(users, ","))
	}
	if err != nil {
		return Token{}, fmt.Errorf("token %s: %w", model.Quote(name, model.UserLengthMax), err)
	}
	return t, nil
}

// newToken checks a token's name, scopes and secret; its users are the
// caller's to set.
func newToken(name, secret string, scopes []string) (Token, error) {
	if err := model.CheckName("token name", name); err != nil {
		return Token{}, err
	}
	if len(scopes) == 0 {
		return Token{}, errors.New("no scopes (want submit, approve or operate)")
	}
	t := Token{name: name, scopes: map[string]bool{}, digest: sha256.Sum256([]byte(secret))}
	for _, s := range scopes {
		if s != model.ScopeSubmit && s != model.ScopeApprove && s != model.ScopeOperate {
			return Token{}, fmt.Errorf("unknown scope %q (want submit, approve or operate)", s)
		}
		t.scopes[s] = true
	}
	if len(secret) < 16 {
		return Token{}, errors.New("secret shorter than 16 characters")
	}
	return t, nil
}

// parseUsers reads a USERS field: "*", or comma-separated user IDs.
func parseUsers(field string) ([]string, error) {
	if field == AllUsers {
		return []string{AllUsers}, nil
	}
	seen := map[string]bool{}
	var users []string
	for _, u := range strings.Split(field, ",") {
		if u == AllUsers {
			return nil, errors.New(`users: "*" stands alone (every user) and cannot be listed with others`)
		}
		if err := model.CheckName("user", u); err != nil {
			return nil, fmt.Errorf("users: %w", err)
		}
		if seen[u] {
			return nil, fmt.Errorf("users: %s listed twice", u)
		}
		seen[u] = true
		users = append(users, u)
	}
	slices.Sort(users)
	return users, nil
}

// distinct refuses tokens two of which share a name (one actor would be
// two) or a secret (it would match neither). Its error names the token,
// never the secret.
func distinct(tokens []Token) error {
	names, secrets := map[string]bool{}, map[[32]byte]bool{}
	for i, t := range tokens {
		if t.name == "" {
			return fmt.Errorf("httpapi: Options.Tokens[%d] is not a token (make it with NewToken or ParseTokens)", i)
		}
		if names[t.name] || secrets[t.digest] {
			return fmt.Errorf("httpapi: Options.Tokens: token %s shares its name or its secret with another", t.name)
		}
		names[t.name], secrets[t.digest] = true, true
	}
	return nil
}

// LoadTokens reads the tokens from a file, or from LEASEHOLD_TOKENS (lines
// separated by ';') when file is "". Its errors name the --tokens flag.
func LoadTokens(file string, strict bool) ([]Token, error) {
	if file != "" {
		st, err := os.Stat(file)
		if err != nil {
			return nil, fmt.Errorf("--tokens: %w", err)
		}
		if st.Size() > 1<<20 {
			return nil, fmt.Errorf("--tokens: %s is larger than 1 MiB", file)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--tokens: %w", err)
		}
		return ParseTokens(string(b), strict)
	}
	if env := os.Getenv("LEASEHOLD_TOKENS"); env != "" {
		return ParseTokens(strings.ReplaceAll(env, ";", "\n"), strict)
	}
	return nil, errors.New("--tokens: required (a file of NAME SCOPES SECRET USERS lines, or LEASEHOLD_TOKENS)")
}

// match finds the token whose secret is secret. Each configured secret's
// digest is compared in constant time, all of them every time, so timing
// says nothing about which came close.
func match(tokens []Token, secret string) (Token, bool) {
	if secret == "" {
		return Token{}, false
	}
	digest := sha256.Sum256([]byte(secret))
	var found Token
	matched := 0
	for _, t := range tokens {
		if subtle.ConstantTimeCompare(digest[:], t.digest[:]) == 1 {
			found, matched = t, matched+1
		}
	}
	return found, matched == 1
}

// Principal is whom a request acts as: the token's name (the actor in
// the audit trail), its scopes and the users it may act for.
type Principal struct {
	Name   string
	Scopes []string
	// Users are the users the token may act for; AllUsers ("*") for all.
	Users []string
}

// Can reports whether the principal holds scope.
func (p Principal) Can(scope string) bool { return slices.Contains(p.Scopes, scope) }

// AllUsers reports whether the principal may act for every user.
func (p Principal) AllUsers() bool { return slices.Contains(p.Users, AllUsers) }

// ActsFor reports whether the principal may act for user.
func (p Principal) ActsFor(user string) bool { return p.AllUsers() || slices.Contains(p.Users, user) }

// visible is the principal's users as the queue's filters take them: nil
// for every user.
func (p Principal) visible() []string {
	if p.AllUsers() {
		return nil
	}
	return slices.Clone(p.Users)
}

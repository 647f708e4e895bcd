package queue

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/internal/redact"
)

// StoreKind names the database a Location is in.
type StoreKind string

// The stores.
const (
	// StoreSQLite is a SQLite file (or Memory) on this machine.
	StoreSQLite StoreKind = "sqlite"
	// StorePostgres is a PostgreSQL database, shared by many machines.
	StorePostgres StoreKind = "postgres"
)

// ErrBadLocation: a --db value (or LEASEHOLD_DB) names no store this build
// can open. Its message never holds a password.
var ErrBadLocation = errors.New("bad database location")

// redacted stands in for a password in every printed location.
const redacted = redact.Mark

// Location is where a queue's database is: a SQLite path or a PostgreSQL
// URL. Its String never shows a password; URL holds it, for connecting
// only.
type Location struct {
	Kind StoreKind
	Path string // StoreSQLite: the file, or Memory
	URL  string // StorePostgres: the connection URL as given, password included
}

// String is the location as it may be printed: the path, or the URL with
// any password replaced by xxxxx.
func (l Location) String() string {
	if l.Kind == StorePostgres {
		return RedactURL(l.URL)
	}
	return l.Path
}

// ParseLocation names a store from a --db value: a postgres:// or
// postgresql:// URL is a PostgreSQL database, anything else without a
// scheme is a SQLite path. A URL that cannot be used is refused with an
// ErrBadLocation error naming what was wrong, with the password redacted
// (url.Parse's own error would quote the URL whole). A PostgreSQL
// key=value connection string (host=... password=...) is refused too,
// naming its keys and none of its values: the store takes the URL form
// only, which has one way to hide its password everywhere it is printed,
// and such a string taken for a file path was echoed, password included.
func ParseLocation(s string) (Location, error) {
	if strings.TrimSpace(s) == "" {
		return Location{}, fmt.Errorf("--db is empty: give a file path or a postgres:// URL: %w", ErrBadLocation)
	}
	if keys := redact.KeywordSettings(s); len(keys) > 0 {
		return Location{}, fmt.Errorf("--db is a PostgreSQL key=value connection string (%s=...): give it as a URL, "+
			"postgres://USER:PASSWORD@HOST:PORT/DATABASE?sslmode=...: %w", strings.Join(keys, "=..., "), ErrBadLocation)
	}
	scheme, _, isURL := strings.Cut(s, "://")
	if !isURL {
		return Location{Kind: StoreSQLite, Path: s}, nil
	}
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
	default:
		return Location{}, fmt.Errorf("--db %s: scheme %q is not supported (use a file path or postgres://): %w",
			RedactURL(s), safeScheme(scheme), ErrBadLocation)
	}
	// pgconn takes the scheme in lower case only.
	s = strings.ToLower(scheme) + s[len(scheme):]
	if err := checkPostgresURL(s); err != nil {
		msg := fmt.Sprintf("--db %s: %s", RedactURL(s), err.Error())
		return Location{}, fmt.Errorf("%s: %w", redact.Passwords(msg, s), ErrBadLocation)
	}
	return Location{Kind: StorePostgres, URL: s}, nil
}

// checkPostgresURL reports, in words of its own, what keeps s from being a
// usable PostgreSQL URL. It never returns a parser's message, which may
// quote the password (a password with a / in it moves the host boundary).
func checkPostgresURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		// url.Parse's message quotes the part it refused; name the problem
		// in words of our own.
		if strings.Contains(err.Error(), "invalid port") && !strings.Contains(redact.Userinfo(s), "/") {
			return errors.New("the port is not a number")
		}
		return errors.New("not a valid URL (a password with reserved characters must be percent-encoded)")
	}
	if u.Opaque != "" {
		return errors.New("not a valid URL: expected postgres://[user[:password]@]host[:port]/database")
	}
	if port := u.Port(); port != "" {
		for _, c := range port {
			if c < '0' || c > '9' {
				return errors.New("the port is not a number")
			}
		}
	}
	if strings.Trim(u.Path, "/") == "" {
		return errors.New("no database named (add /DATABASE after the host)")
	}
	if strings.Contains(strings.Trim(u.Path, "/"), "/") {
		return errors.New("the database name has a / in it")
	}
	if _, err := pgconn.ParseConfig(s); err != nil {
		return errors.New(scrubSettingError(err.Error(), u))
	}
	return nil
}

// scrubSettingError keeps what pgconn said was wrong with a setting, with
// the URL and any password removed.
func scrubSettingError(msg string, u *url.URL) string {
	// pgconn's message is "cannot parse `URL`: what (cause)"; keep what.
	if i := strings.LastIndex(msg, "`: "); i >= 0 {
		msg = msg[i+3:]
	}
	if pw, ok := u.User.Password(); ok && pw != "" {
		msg = strings.ReplaceAll(msg, pw, redacted)
	}
	if pw := u.Query().Get("password"); pw != "" {
		msg = strings.ReplaceAll(msg, pw, redacted)
	}
	return "a connection setting is not valid: " + msg
}

// safeScheme returns scheme if it is a plain word, and a placeholder
// otherwise (a malformed value might have a password before its ://).
func safeScheme(scheme string) string {
	for _, c := range scheme {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '+' || c == '-' || c == '.') {
			return "(not a scheme)"
		}
	}
	return scheme
}

// RedactURL returns s with the password of its user information, and any
// password= setting, replaced by xxxxx (see redact.URL).
func RedactURL(s string) string { return redact.URL(s) }

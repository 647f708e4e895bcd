package queue

import (
	"errors"
	"fmt"
	"strings"

	"github.com/leasehold/leasehold/internal/redact"
	"github.com/leasehold/leasehold/queue/internal/postgres"
)

// StoreKind names the database a Location is in.
type StoreKind string

// The stores.
const (
	// StoreSQLite is a SQLite file (or Memory) on this machine.
	StoreSQLite StoreKind = "sqlite"
	// StorePostgres is a PostgreSQL database, shared by many machines.
	StorePostgres StoreKind = postgres.Dialect
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
	u, err := postgres.ParseURL(s)
	if err != nil {
		return Location{}, fmt.Errorf("%w: %w", err, ErrBadLocation)
	}
	return Location{Kind: StorePostgres, URL: u}, nil
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

package queue

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
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
const redacted = "xxxxx"

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
	if keys := keywordSettings(s); len(keys) > 0 {
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
		return Location{}, fmt.Errorf("%s: %w", scrubPasswords(msg, s), ErrBadLocation)
	}
	return Location{Kind: StorePostgres, URL: s}, nil
}

// keywordSetting matches a setting of a libpq key=value connection string:
// one of its connection keywords at the start or after white space, then
// "=" (white space around it allowed).
var keywordSetting = regexp.MustCompile(`(?:^|\s)(host|hostaddr|port|dbname|user|password|passfile|sslmode|sslcert|sslkey|` +
	`sslrootcert|sslpassword|sslnegotiation|application_name|connect_timeout|options|target_session_attrs|service|` +
	`servicefile|channel_binding|gssencmode|requiressl|keepalives|client_encoding)\s*=`)

// keywordSettings returns the keywords of s, in order, when s is a libpq
// key=value connection string (it has no :// and at least one of its
// keywords); nil otherwise.
func keywordSettings(s string) []string {
	if strings.Contains(s, "://") {
		return nil
	}
	var keys []string
	for _, m := range keywordSetting.FindAllStringSubmatch(s, -1) {
		keys = append(keys, m[1])
	}
	return keys
}

// checkPostgresURL reports, in words of its own, what keeps s from being a
// usable PostgreSQL URL. It never returns a parser's message, which may
// quote the password (a password with a / in it moves the host boundary).
func checkPostgresURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		// url.Parse's message quotes the part it refused; name the problem
		// in words of our own.
		if strings.Contains(err.Error(), "invalid port") && !strings.Contains(userinfoOf(s), "/") {
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

// userinfoOf returns what RedactURL takes for s's user information.
func userinfoOf(s string) string {
	_, rest, _ := strings.Cut(s, "://")
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		return rest[:at]
	}
	return ""
}

// scrubPasswords replaces in msg every occurrence of a password that s
// (a URL, perhaps malformed) holds, wherever else in s it appears.
func scrubPasswords(msg, s string) string {
	if _, pw, ok := strings.Cut(userinfoOf(s), ":"); ok && pw != "" {
		msg = strings.ReplaceAll(msg, pw, redacted)
	}
	lower := strings.ToLower(s)
	for i := strings.Index(lower, "password="); i >= 0; {
		start := i + len("password=")
		end := start
		for end < len(s) && s[end] != '&' && s[end] != ' ' && s[end] != '#' {
			end++
		}
		if pw := s[start:end]; pw != "" {
			msg = strings.ReplaceAll(msg, pw, redacted)
		}
		next := strings.Index(lower[end:], "password=")
		if next < 0 {
			break
		}
		i = end + next
	}
	return msg
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
// password= query setting, replaced by xxxxx. It works on malformed URLs
// too: everything between :// and the last @ is user information, so a
// password holding / or @ is hidden whole (a stray @ later in the URL
// hides more than it must, never less).
func RedactURL(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return redactPasswordSetting(s)
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		userinfo, host := rest[:at], rest[at+1:]
		if user, _, hasPassword := strings.Cut(userinfo, ":"); hasPassword {
			userinfo = user + ":" + redacted
		}
		rest = userinfo + "@" + host
	}
	return scheme + "://" + redactPasswordSetting(rest)
}

// redactPasswordSetting hides the value of every password= setting in s
// (a URL query's, or a key=value connection string's). A connection
// string, whose value may be quoted and hold spaces, is hidden whole but
// for its keywords.
func redactPasswordSetting(s string) string {
	if keys := keywordSettings(s); len(keys) > 0 {
		return strings.Join(keys, "="+redacted+" ") + "=" + redacted
	}
	lower := strings.ToLower(s)
	var out strings.Builder
	for i := 0; i < len(s); {
		j := strings.Index(lower[i:], "password=")
		if j < 0 || (i+j > 0 && !isSettingBoundary(s[i+j-1])) {
			if j < 0 {
				out.WriteString(s[i:])
				break
			}
			out.WriteString(s[i : i+j+len("password=")])
			i += j + len("password=")
			continue
		}
		start := i + j + len("password=")
		out.WriteString(s[i:start])
		end := start
		for end < len(s) && s[end] != '&' && s[end] != ' ' && s[end] != '#' {
			end++
		}
		out.WriteString(redacted)
		i = end
	}
	return out.String()
}

func isSettingBoundary(c byte) bool { return c == '?' || c == '&' || c == ' ' || c == ';' }

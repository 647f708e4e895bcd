package postgres

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/internal/redact"
)

// ParseURL checks s, a postgres:// or postgresql:// URL (the scheme in any
// case), and returns it with its scheme in lower case, which pgconn
// takes alone. A URL that cannot be used is refused in words of its own,
// naming what was wrong, with the password redacted: never a parser's
// message, which may quote the URL whole.
func ParseURL(s string) (string, error) {
	scheme, _, _ := strings.Cut(s, "://")
	s = strings.ToLower(scheme) + s[len(scheme):]
	if err := checkURL(s); err != nil {
		return "", errors.New(redact.Passwords(fmt.Sprintf("--db %s: %s", redact.URL(s), err.Error()), s))
	}
	return s, nil
}

// checkURL reports, in words of its own, what keeps s from being a
// usable PostgreSQL URL. It never returns a parser's message, which may
// quote the password (a password with a / in it moves the host boundary).
func checkURL(s string) error {
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
		msg = strings.ReplaceAll(msg, pw, redact.Mark)
	}
	if pw := u.Query().Get("password"); pw != "" {
		msg = strings.ReplaceAll(msg, pw, redact.Mark)
	}
	return "a connection setting is not valid: " + msg
}

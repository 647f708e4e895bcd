// Package redact keeps passwords out of what leasehold prints: a database
// URL's password (its user information's, and any password= setting's)
// in locations, in messages and in errors.
package redact

import (
	"regexp"
	"strings"
)

// Mark stands in for a password in everything printed.
const Mark = "xxxxx"

// keywordSetting matches a setting of a libpq key=value connection string:
// one of its connection keywords at the start or after white space, then
// "=" (white space around it allowed).
var keywordSetting = regexp.MustCompile(`(?:^|\s)(host|hostaddr|port|dbname|user|password|passfile|sslmode|sslcert|sslkey|` +
	`sslrootcert|sslpassword|sslnegotiation|application_name|connect_timeout|options|target_session_attrs|service|` +
	`servicefile|channel_binding|gssencmode|requiressl|keepalives|client_encoding)\s*=`)

// KeywordSettings returns the keywords of s, in order, when s is a libpq
// key=value connection string (it has no :// and at least one of its
// keywords); nil otherwise.
func KeywordSettings(s string) []string {
	if strings.Contains(s, "://") {
		return nil
	}
	var keys []string
	for _, m := range keywordSetting.FindAllStringSubmatch(s, -1) {
		keys = append(keys, m[1])
	}
	return keys
}

// Userinfo returns what URL takes for s's user information: everything
// between :// and the last @.
func Userinfo(s string) string {
	_, rest, _ := strings.Cut(s, "://")
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		return rest[:at]
	}
	return ""
}

// Passwords replaces in msg every occurrence of a password that s
// (a URL, perhaps malformed) holds, wherever else in s it appears.
func Passwords(msg, s string) string {
	if _, pw, ok := strings.Cut(Userinfo(s), ":"); ok && pw != "" {
		msg = strings.ReplaceAll(msg, pw, Mark)
	}
	lower := strings.ToLower(s)
	for i := strings.Index(lower, "password="); i >= 0; {
		start := i + len("password=")
		end := start
		for end < len(s) && s[end] != '&' && s[end] != ' ' && s[end] != '#' {
			end++
		}
		if pw := s[start:end]; pw != "" {
			msg = strings.ReplaceAll(msg, pw, Mark)
		}
		next := strings.Index(lower[end:], "password=")
		if next < 0 {
			break
		}
		i = end + next
	}
	return msg
}

// URL returns s with the password of its user information, and any
// password= query setting, replaced by xxxxx. It works on malformed URLs
// too: everything between :// and the last @ is user information, so a
// password holding / or @ is hidden whole (a stray @ later in the URL
// hides more than it must, never less).
func URL(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return redactPasswordSetting(s)
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		userinfo, host := rest[:at], rest[at+1:]
		if user, _, hasPassword := strings.Cut(userinfo, ":"); hasPassword {
			userinfo = user + ":" + Mark
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
	if keys := KeywordSettings(s); len(keys) > 0 {
		return strings.Join(keys, "="+Mark+" ") + "=" + Mark
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
		out.WriteString(Mark)
		i = end
	}
	return out.String()
}

func isSettingBoundary(c byte) bool { return c == '?' || c == '&' || c == ' ' || c == ';' }

// Error returns err with every password rawURL holds removed from its
// message; it unwraps to err, so its class is still read. err itself when
// its message holds none.
func Error(err error, rawURL string) error {
	return Message(err, Passwords(err.Error(), rawURL))
}

// Message returns err with msg (err's own message, with what must not be
// printed removed) as its message; it unwraps to err. err itself when msg
// is its message.
func Message(err error, msg string) error {
	if msg == err.Error() {
		return err
	}
	return &scrubbed{msg: msg, err: err}
}

// scrubbed is an error whose message has a password removed.
type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }

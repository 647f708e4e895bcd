package queue

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseLocationNamesTheStore(t *testing.T) {
	for _, tc := range []struct {
		in   string
		kind StoreKind
		show string
	}{
		{"leasehold.db", StoreSQLite, "leasehold.db"},
		{"/var/lib/leasehold/q.db", StoreSQLite, "/var/lib/leasehold/q.db"},
		{Memory, StoreSQLite, Memory},
		{"postgres://postgres@127.0.0.1:5432/test?sslmode=disable", StorePostgres,
			"postgres://postgres@127.0.0.1:5432/test?sslmode=disable"},
		{"postgresql://app:s3cret@db.internal/queue", StorePostgres, "postgresql://app:xxxxx@db.internal/queue"},
		{"POSTGRES://app:s3cret@db.internal/queue", StorePostgres, "postgres://app:xxxxx@db.internal/queue"},
		{"postgres://app@db/queue?password=s3cret&sslmode=require", StorePostgres,
			"postgres://app@db/queue?password=xxxxx&sslmode=require"},
	} {
		loc, err := ParseLocation(tc.in)
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.kind, loc.Kind, tc.in)
		require.Equal(t, tc.show, loc.String(), tc.in)
		require.NotContains(t, loc.String(), "s3cret")
		if tc.kind == StorePostgres {
			require.True(t, strings.EqualFold(tc.in, loc.URL), "the URL keeps its password for connecting")
		} else {
			require.Equal(t, tc.in, loc.Path)
		}
	}
}

// TestParseLocationRefusesWithoutThePassword: every refusal names what was
// wrong and never quotes the password, even where the URL is too broken to
// tell where the password ends.
func TestParseLocationRefusesWithoutThePassword(t *testing.T) {
	const secret = "hunter2pw"
	for _, tc := range []struct {
		in, says string
	}{
		{"", "empty"},
		{"   ", "empty"},
		{"mysql://root:" + secret + "@db/queue", `scheme "mysql" is not supported`},
		{"postgres://app:" + secret + "@db:54x2/queue", "port is not a number"},
		{"postgres://app:hunter/2pw" + "@db/queue", "not a valid URL"},
		{"postgres://app:" + secret + "@db", "no database named"},
		{"postgres://app:" + secret + "@db/", "no database named"},
		{"postgres://app:" + secret + "@db/a/b", "has a / in it"},
		{"postgres://app:" + secret + "@db/queue?sslmode=sometimes", "sslmode"},
		{"postgres://app:" + secret + "@db/queue?connect_timeout=" + secret, "connection setting is not valid"},
		{"postgres://app:%zz" + secret + "@db/queue", "not a valid URL"},
		{"host=127.0.0.1 port=1 password=" + secret, "key=value connection string (host=..., port=..., password=...)"},
		{"password='" + secret + " x' host=db", "key=value connection string (password=..., host=...)"},
		{"host=db password = " + secret, "key=value connection string (host=..., password=...)"},
		{"dbname=queue user=app", "give it as a URL"},
	} {
		_, err := ParseLocation(tc.in)
		require.Error(t, err, tc.in)
		require.True(t, errors.Is(err, ErrBadLocation), tc.in)
		require.Contains(t, err.Error(), tc.says, tc.in)
		require.NotContains(t, err.Error(), secret, tc.in)
		require.NotContains(t, err.Error(), "hunter", tc.in)
		require.NotContains(t, err.Error(), "2pw", tc.in)
		require.NotContains(t, err.Error(), "\n", "one line")
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:p@h/d":                        "postgres://u:xxxxx@h/d",
		"postgres://u@h/d":                          "postgres://u@h/d",
		"postgres://h/d":                            "postgres://h/d",
		"postgres://u:pa/ss@h/d":                    "postgres://u:xxxxx@h/d",
		"postgres://u:p@ss@h/d":                     "postgres://u:xxxxx@h/d",
		"postgres://u:@h/d":                         "postgres://u:xxxxx@h/d",
		"postgres://h/d?sslmode=disable&password=p": "postgres://h/d?sslmode=disable&password=xxxxx",
		"host=h user=u password=p dbname=d":         "host=xxxxx user=xxxxx password=xxxxx dbname=xxxxx",
		"host=h mypassword=p":                       "host=xxxxx",
		"password='top secret' host=h":              "password=xxxxx host=xxxxx",
		"host=h password = top\\'secret":            "host=xxxxx password=xxxxx",
		"/var/lib/q.db":                             "/var/lib/q.db",
	} {
		require.Equal(t, want, RedactURL(in), in)
	}
	for _, in := range []string{"postgres://u:topsecret@h/d", "postgres://u:top/secret@h:5x/d?password=topsecret",
		"host=h password='top secret'", "host=h password = topsecret", "  password=topsecret"} {
		require.False(t, strings.Contains(RedactURL(in), "secret"), in)
	}
}

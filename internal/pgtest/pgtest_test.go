package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// recorder is a testing.TB that records a skip or a failure instead of
// stopping the test.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                        {}
func (r *recorder) Skipf(format string, a ...any)  { r.skipped = fmt.Sprintf(format, a...) }
func (r *recorder) Fatalf(format string, a ...any) { r.failed = fmt.Sprintf(format, a...) }

func TestServerURLSkipsOrFailsWhenUnset(t *testing.T) {
	t.Setenv(Env, "")
	t.Setenv("CI", "")
	r := &recorder{}
	require.Empty(t, ServerURL(r))
	require.Empty(t, r.failed)
	require.Contains(t, r.skipped, "set "+Env+"="+ExampleURL)
	require.NotContains(t, r.skipped, "\n", "one line")

	t.Setenv("CI", "1")
	r = &recorder{}
	require.Empty(t, ServerURL(r))
	require.Empty(t, r.skipped)
	require.Contains(t, r.failed, Env+" is not set and CI is")

	t.Setenv(Env, ExampleURL)
	r = &recorder{}
	require.Equal(t, ExampleURL, ServerURL(r))
	require.Empty(t, r.skipped+r.failed)
}

// TestFreshGivesEachTestItsOwnSchema: each call makes a schema of its own,
// migrated by the setup given and named by the URL's search_path, and the
// schema is dropped when its test ends.
func TestFreshGivesEachTestItsOwnSchema(t *testing.T) {
	server := ServerURL(t)
	ctx := context.Background()
	setup := func(ctx context.Context, u string) error {
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "CREATE TABLE marker (n INTEGER); INSERT INTO marker VALUES (1)")
		return err
	}
	var schemas []string
	for i := range 2 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			u := Fresh(t, setup)
			parsed, err := url.Parse(u)
			require.NoError(t, err)
			require.Equal(t, "/"+Database, parsed.Path)
			schema := parsed.Query().Get("search_path")
			require.True(t, strings.HasPrefix(schema, "t_"), schema)
			schemas = append(schemas, schema)
			conn, err := pgx.Connect(ctx, u)
			require.NoError(t, err)
			defer conn.Close(ctx)
			var where string
			var n int
			require.NoError(t, conn.QueryRow(ctx, "SELECT current_schema(), (SELECT COUNT(*) FROM marker)").Scan(&where, &n))
			require.Equal(t, schema, where)
			require.Equal(t, 1, n, "the setup ran in this schema, once")
		})
	}
	require.Len(t, schemas, 2)
	require.NotEqual(t, schemas[0], schemas[1])
	for _, s := range schemas {
		found, err := SchemaExists(ctx, server, s)
		require.NoError(t, err)
		require.False(t, found, "schema %s outlived its test", s)
	}
}

package queue

import (
	"database/sql"
	"testing"
	"testing/fstest"

	"github.com/leasehold/leasehold/internal/broken"

	sqlitestore "github.com/leasehold/leasehold/queue/internal/sqlite"
	"github.com/stretchr/testify/require"
)

// queries returns the SQLite store's query texts by name, for tests that
// run them on a raw connection.
func queries() (map[string]string, error) {
	set, err := sqlOf(sqlitestore.Store{})
	if err != nil {
		return nil, err
	}
	texts := make(map[string]string, len(set.queries))
	for name, q := range set.queries {
		texts[name] = q.text
	}
	return texts, nil
}

// TestRewriteParams: named parameters become $n in order of first use, a
// repeated name keeps its number, and quoted text, comments and casts are
// left as they are.
func TestRewriteParams(t *testing.T) {
	cases := []struct {
		in, out string
		params  []string
	}{
		{"SELECT 1", "SELECT 1", nil},
		{"UPDATE t SET a = :a, b = :b WHERE id = :id AND a < :a",
			"UPDATE t SET a = $1, b = $2 WHERE id = $3 AND a < $1", []string{"a", "b", "id"}},
		{"SELECT ':not', \":nor\" FROM t WHERE x = :x", "SELECT ':not', \":nor\" FROM t WHERE x = $1", []string{"x"}},
		{"SELECT 'it''s :q' || :p", "SELECT 'it''s :q' || $1", []string{"p"}},
		{"SELECT :v::bigint, x::text", "SELECT $1::bigint, x::text", []string{"v"}},
		{"SELECT 1 -- :c\nFROM t WHERE y = :y_2", "SELECT 1 -- :c\nFROM t WHERE y = $1", []string{"y_2"}},
		{"a = :1 OR b = :", "a = :1 OR b = :", nil},
	}
	for _, c := range cases {
		out, params := rewriteParams(c.in)
		require.Equal(t, c.out, out, c.in)
		require.Equal(t, c.params, params, c.in)
	}
	var many string
	for i := range 12 {
		many += " :p" + string(rune('a'+i))
	}
	out, params := rewriteParams(many)
	require.Len(t, params, 12)
	require.Equal(t, " $1 $2 $3 $4 $5 $6 $7 $8 $9 $10 $11 $12", out)
}

// TestBindArgs: a positional query gets its named arguments in parameter
// order; a missing one is an error naming it, an unused one is ignored; a
// named dialect's arguments pass through untouched.
func TestBindArgs(t *testing.T) {
	q := query{text: "x = $1 AND y = $2", params: []string{"x", "y"}}
	args, err := bindArgs("q", q, []any{sql.Named("y", 2), sql.Named("unused", 3), sql.Named("x", "one")})
	require.NoError(t, err)
	require.Equal(t, []any{"one", 2}, args)

	_, err = bindArgs("q", q, []any{sql.Named("x", 1)})
	require.ErrorContains(t, err, "q: no argument for :y")
	_, err = bindArgs("q", q, []any{1, 2})
	require.ErrorContains(t, err, "q: argument int is not named")

	named := []any{sql.Named("x", 1)}
	args, err = bindArgs("q", query{text: "x = :x"}, named)
	require.NoError(t, err)
	require.Equal(t, named, args)
}

// TestLoadSQLPositional: a positional dialect's queries are rewritten at
// load, {task_columns} expanded first; migrations are numbered from 1
// without gaps.
func TestLoadSQLPositional(t *testing.T) {
	files := fstest.MapFS{
		"queries.sql":              {Data: []byte("-- name: task_columns\nid, user_id\n\n-- name: task_by_id\n-- a comment line\nSELECT {task_columns} FROM tasks WHERE id = :id AND user_id = :user;\n")},
		"migrations/0001_init.sql": {Data: []byte("CREATE TABLE tasks (id TEXT, user_id TEXT);\n")},
		"migrations/0002_more.sql": {Data: []byte("CREATE INDEX t ON tasks (user_id);\n")},
	}
	set, err := loadSQL(files, true)
	require.NoError(t, err)
	require.Equal(t, query{text: "SELECT id, user_id FROM tasks WHERE id = $1 AND user_id = $2;", params: []string{"id", "user"}},
		set.queries["task_by_id"])
	require.Len(t, set.migrations, 2)
	require.Equal(t, 2, set.migrations[1].Version)

	files["migrations/0004_gap.sql"] = &fstest.MapFile{Data: []byte("SELECT 1;")}
	_, err = loadSQL(files, true)
	require.ErrorContains(t, err, "0004_gap.sql: expected number 3")
	delete(files, "migrations/0004_gap.sql")
	files["migrations/init.sql"] = &fstest.MapFile{Data: []byte("SELECT 1;")}
	_, err = loadSQL(files, true)
	require.ErrorContains(t, err, "init.sql: name must start with its number")
}

// TestBackendFor: SQLite handles paths and Memory when no other store
// claims them.
func TestBackendFor(t *testing.T) {
	require.Equal(t, "sqlite", backendFor("leasehold.db").Dialect())
	require.Equal(t, "sqlite", backendFor(Memory).Dialect())
}

// TestExpandBroken: a placeholder is its safe text unless its variant is
// the one switched on; the variants are listed once each, in order; a
// malformed placeholder or an unknown variant is an error.
func TestExpandBroken(t *testing.T) {
	text := "WHERE a = 1 {broken:no-user-limit|AND b = 0|} AND c {broken:claim-exclusive-run-at|<=|<} :now {broken:no-user-limit|AND d|AND e}"
	safe, variants, err := expandBroken(text, 0)
	require.NoError(t, err)
	require.Equal(t, "WHERE a = 1 AND b = 0 AND c <= :now AND d", safe)
	require.Equal(t, []broken.Variant{broken.NoUserLimit, broken.ClaimExclusiveRunAt}, variants)
	unlimited, _, err := expandBroken(text, broken.NoUserLimit)
	require.NoError(t, err)
	require.Equal(t, "WHERE a = 1  AND c <= :now AND e", unlimited)
	exclusive, _, err := expandBroken(text, broken.ClaimExclusiveRunAt)
	require.NoError(t, err)
	require.Equal(t, "WHERE a = 1 AND b = 0 AND c < :now AND d", exclusive)

	_, _, err = expandBroken("x {broken:no-user-limit|a", 0)
	require.ErrorContains(t, err, "unclosed")
	_, _, err = expandBroken("x {broken:no-user-limit|a}", 0)
	require.ErrorContains(t, err, "want {broken:VARIANT|safe|broken}")
	_, _, err = expandBroken("x {broken:no-such|a|b}", 0)
	require.ErrorContains(t, err, `no variant named "no-such"`)
}

// TestBrokenVariantsLoaded: the SQLite queries name their variants, and
// only the leasehold_broken build loads the broken texts.
func TestBrokenVariantsLoaded(t *testing.T) {
	set, err := sqlOf(sqlitestore.Store{})
	require.NoError(t, err)
	claimNext := set.queries["claim_next"]
	require.Contains(t, claimNext.text, "blocked = 0")
	require.NotContains(t, claimNext.text, "{broken:")
	_, loaded := set.queries["claim_next~no-user-limit"]
	require.Equal(t, broken.Built, loaded)
	if broken.Built {
		require.Equal(t, []broken.Variant{broken.NoUserLimit, broken.ClaimExclusiveRunAt, broken.ClaimPastDeadline},
			claimNext.variants)
		require.NotContains(t, set.queries["claim_next~no-user-limit"].text, "blocked")
	} else {
		require.Empty(t, claimNext.variants)
	}
}

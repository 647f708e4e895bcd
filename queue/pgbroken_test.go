package queue

import (
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/broken"
	"github.com/leasehold/leasehold/queue/internal/postgres"
	sqlitestore "github.com/leasehold/leasehold/queue/internal/sqlite"
)

// brokenVariantsOf returns, for every query of b's SQL files that has
// broken-variant placeholders, the variants it names.
func brokenVariantsOf(t *testing.T, b backend) map[string][]broken.Variant {
	t.Helper()
	texts, err := loadQueries(b.SQLFiles())
	require.NoError(t, err)
	out := map[string][]broken.Variant{}
	for name, text := range texts {
		_, variants, err := expandBroken(text, 0)
		require.NoError(t, err, name)
		if len(variants) > 0 {
			out[name] = variants
		}
	}
	return out
}

// allVariants is every variant named in a query set, in order.
func allVariants(byQuery map[string][]broken.Variant) []broken.Variant {
	var all []broken.Variant
	for _, vs := range byQuery {
		all = append(all, vs...)
	}
	slices.Sort(all)
	return slices.Compact(all)
}

// sqliteOnly is byQuery without the variants only SQLite's queries name.
func sqliteOnly(byQuery map[string][]broken.Variant, only ...broken.Variant) map[string][]broken.Variant {
	out := map[string][]broken.Variant{}
	for name, vs := range byQuery {
		var kept []broken.Variant
		for _, v := range vs {
			if !slices.Contains(only, v) {
				kept = append(kept, v)
			}
		}
		if len(kept) > 0 {
			out[name] = kept
		}
	}
	return out
}

// TestPostgresSQLNamesTheBrokenVariants: the PostgreSQL queries and
// functions carry a placeholder for every broken variant SQLite's queries
// do, so that a leasehold_broken sweep can switch each on against either
// store, and for the lone submit's (submit_one runs in the server what
// SQLite's submit checks in Go, where broken.Pick names them) and the
// fused group's fence (complete_and_claim's, PostgreSQL's alone); and each
// query both files have names the same variants in both.
func TestPostgresSQLNamesTheBrokenVariants(t *testing.T) {
	lite, pg := brokenVariantsOf(t, sqlitestore.Store{}), brokenVariantsOf(t, postgres.Store{})
	require.NotEmpty(t, lite)
	pg[functionsFile] = functionsVariants(t)
	// replay-ignores-tombstone breaks SQLite's key lookups alone: the
	// simulator's sweeps of the SQLite store catch it.
	lite = sqliteOnly(lite, broken.ReplayIgnoresTombstone)
	want := append(allVariants(lite), broken.ChangedRequestReplayed, broken.DepthCapOffByOne, broken.FusedCompletionUnfenced)
	slices.Sort(want)
	require.Equal(t, slices.Compact(want), allVariants(pg))
	pgTexts, err := loadQueries(postgres.Store{}.SQLFiles())
	require.NoError(t, err)
	for name, vs := range lite {
		if _, both := pgTexts[name]; !both {
			continue // SQLite's alone (claim_next: PostgreSQL's claim is claim_batch)
		}
		require.ElementsMatch(t, vs, pg[name], "query %s", name)
	}
}

// TestPostgresBrokenVariantsPrepare: the server parses every broken
// variant's text of the PostgreSQL queries (in any build: the texts are
// expanded here) and gives each of its parameters the type the safe text
// gives it, so a variant switched on fails as its mechanism's absence,
// never as a syntax error or a time that does not fit an int4.
func TestPostgresBrokenVariantsPrepare(t *testing.T) {
	f := freshPostgres(t)
	conn, err := pgx.Connect(f.ctx, f.url)
	require.NoError(t, err)
	defer conn.Close(f.ctx)
	texts, err := loadQueries(postgres.Store{}.SQLFiles())
	require.NoError(t, err)
	paramTypes := func(text string) map[string]uint32 {
		rewritten, names := rewriteParams(text)
		sd, err := conn.Prepare(f.ctx, "", rewritten)
		require.NoError(t, err, "prepare %s", text)
		types := map[string]uint32{}
		for i, name := range names {
			types[name] = sd.ParamOIDs[i]
		}
		return types
	}
	prepared := 0
	for name, vs := range brokenVariantsOf(t, postgres.Store{}) {
		safe, _, err := expandBroken(texts[name], 0)
		require.NoError(t, err)
		want := paramTypes(safe)
		for _, v := range vs {
			text, _, err := expandBroken(texts[name], v)
			require.NoError(t, err)
			for param, oid := range paramTypes(text) {
				require.Equal(t, want[param], oid, "%s~%s: parameter :%s", name, v, param)
			}
			prepared++
		}
	}
	require.Greater(t, prepared, 10)
}

// functionsVariants is the variants functions.sql names.
func functionsVariants(t *testing.T) []broken.Variant {
	t.Helper()
	set, err := sqlOf(postgres.Store{})
	require.NoError(t, err)
	_, variants, err := expandBroken(set.functions.text, 0)
	require.NoError(t, err)
	require.NotEmpty(t, variants)
	return variants
}

// TestPostgresBrokenFunctionsInstall: functions.sql installs with each of
// its broken variants on (in any build: the text is expanded here), each
// in a schema of its own, so a variant switched on fails as its
// mechanism's absence, never as a syntax error; and its text differs from
// the safe one.
func TestPostgresBrokenFunctionsInstall(t *testing.T) {
	set, err := sqlOf(postgres.Store{})
	require.NoError(t, err)
	safe, _, err := set.functions.expanded(func(broken.Variant) bool { return false })
	require.NoError(t, err)
	for _, v := range functionsVariants(t) {
		t.Run(v.String(), func(t *testing.T) {
			f := freshPostgres(t)
			text, _, err := set.functions.expanded(func(w broken.Variant) bool { return w == v })
			require.NoError(t, err)
			require.NotEqual(t, safe, text)
			_, err = f.db.ExecContext(f.ctx, text)
			require.NoError(t, err)
		})
	}
}

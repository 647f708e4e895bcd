package queue

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/queue/internal/postgres"
	"github.com/leasehold/leasehold/queue/internal/seam"
	sqlitestore "github.com/leasehold/leasehold/queue/internal/sqlite"
)

// queryNameFiles are the files that declare query names: the protocol's
// and each store's own.
var queryNameFiles = []string{"querynames.go", "internal/sqlite/querynames.go", "internal/postgres/querynames.go"}

// declaredQueries reads the queryNameFiles and returns the query names
// each of their var blocks declares, by the stores its doc comment names:
// "both", "postgres" or "sqlite".
func declaredQueries(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, name := range queryNameFiles {
		declaredIn(t, name, out)
	}
	return out
}

// declaredIn adds the query names the file at path declares to out.
func declaredIn(t *testing.T, path string, out map[string][]string) {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments)
	require.NoError(t, err)
	for _, decl := range file.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.VAR {
			continue
		}
		doc := gen.Doc.Text()
		stores := "both"
		switch {
		case strings.Contains(doc, "only PostgreSQL"):
			stores = "postgres"
		case strings.Contains(doc, "only SQLite"):
			stores = "sqlite"
		}
		for _, spec := range gen.Specs {
			lit := spec.(*ast.ValueSpec).Values[0].(*ast.CallExpr).Args[0].(*ast.BasicLit)
			name, err := strconv.Unquote(lit.Value)
			require.NoError(t, err)
			out[stores] = append(out[stores], name)
		}
	}
}

// TestQueryNamesAreDefined: every queryName the protocol may run is a
// section of the SQL files of each store it is declared for, and every
// section of either store's files is declared, under the stores that
// define it.
func TestQueryNamesAreDefined(t *testing.T) {
	lite, err := sqlOf(sqlitestore.Store{})
	require.NoError(t, err)
	pg, err := sqlOf(postgres.Store{})
	require.NoError(t, err)
	declared := declaredQueries(t)
	require.NotEmpty(t, declared["both"])
	seen := map[string]bool{"task_columns": true}
	for stores, names := range declared {
		for _, name := range names {
			require.False(t, seen[name], "%s declared twice", name)
			seen[name] = true
			_, inLite := lite.queries[name]
			_, inPG := pg.queries[name]
			require.Equal(t, stores == "both" || stores == "sqlite", inLite, "%s in SQLite's files", name)
			require.Equal(t, stores == "both" || stores == "postgres", inPG, "%s in PostgreSQL's files", name)
		}
	}
	for _, set := range []*sqlSet{lite, pg} {
		for name := range set.queries {
			require.True(t, seen[name] || isBrokenVariant(name), "section %s has no queryName", name)
		}
	}
}

// TestCapabilitiesMatchTheSQL: a store states an ability exactly when its
// SQL files define the statements the ability runs, so the protocol,
// which asks the capabilities, never runs a statement a store lacks.
func TestCapabilitiesMatchTheSQL(t *testing.T) {
	for _, b := range backends {
		set, err := sqlOf(b)
		require.NoError(t, err)
		has := func(n queryName) bool { _, ok := set.queries[n.String()]; return ok }
		c := b.Capabilities()
		require.Equal(t, c.BlockedFlags, has(qReblockAll) && has(qReblockUser), b.Dialect())
		require.Equal(t, c.CounterRows, has(qTallyCompact) && has(qTallyRows), b.Dialect())
		require.Equal(t, c.CommitsOutOfOrder, has(qEventsAfterLock) && has(qMigrationsLock), b.Dialect())
		require.Equal(t, c.Fuse != nil, has(seam.Name("complete_and_claim")), b.Dialect())
		require.Equal(t, c.Submit != nil, has(seam.Name("submit_one")), b.Dialect())
		require.Equal(t, c.Notify != nil, has(seam.Name("ready_notify")) && has(seam.Name("ready_listen")), b.Dialect())
		require.Equal(t, c.WALTruncate, has(qWalTruncate), b.Dialect())
	}
}

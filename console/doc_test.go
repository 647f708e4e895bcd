package console

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/httpapi"
	"github.com/leasehold/leasehold/internal/doctest"
)

// TestPackageDocExampleIsCompiled: the package doc's example is part of
// package httpapi's example program, which compiles and runs.
func TestPackageDocExampleIsCompiled(t *testing.T) {
	doctest.RequirePackageDocIn(t, "doc.go", "../httpapi/example_test.go")
}

// TestConsoleReadsOnlyThroughTheAPI: no file of the console imports the
// queue: every read and write goes through the API's cores, so the
// console can show nothing the API would not.
func TestConsoleReadsOnlyThroughTheAPI(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, spec := range f.Imports {
			require.NotEqual(t, `"github.com/leasehold/leasehold/queue"`, spec.Path.Value, "%s imports the queue", name)
		}
	}
}

// TestNewTakesTheAPI: a console needs the API's server (or a Backend),
// and made from the server alone it keeps the server's clock, so its
// sessions expire on the clock the API's waits run on.
func TestNewTakesTheAPI(t *testing.T) {
	_, err := New(Options{})
	require.ErrorContains(t, err, "Options.API is required")

	b := setup(t)
	tokens, err := httpapi.ParseTokens(tokenLines, true)
	require.NoError(t, err)
	api, err := httpapi.New(httpapi.Options{Queue: b.q, Tokens: tokens, Clock: b.clock, AuthDelay: -1})
	require.NoError(t, err)
	c, err := New(Options{API: api})
	require.NoError(t, err)
	defer c.Close()
	require.Same(t, b.clock, c.clock)
}

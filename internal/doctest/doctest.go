// Package doctest keeps the code examples of documents compiled: a
// snippet of a README, an API tour or a package's doc comment is required
// to appear, line for line, in a Go file the test build compiles (an
// Example function, or a function beside it), so an example that stops
// compiling, or drifts from the code that compiles, fails a test.
package doctest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// indentMax bounds the extra tabs a snippet's lines may carry in the
// file that compiles them (a function's body, a loop in it).
const indentMax = 3

// RequireIn fails t unless the lines of snippet appear in the Go file at
// path in order and contiguous, each with the same number of extra
// leading tabs (0 to indentMax), ignoring trailing white space. A snippet
// that opens with an import block needs only each of its paths imported
// by the file; the rest must appear as said.
func RequireIn(t testing.TB, snippet []string, path string) {
	t.Helper()
	src, err := os.ReadFile(path)
	require.NoError(t, err)
	imports, body := splitImports(snippet)
	if len(imports) > 0 {
		f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.ImportsOnly)
		require.NoError(t, err)
		have := map[string]bool{}
		for _, spec := range f.Imports {
			have[strings.Trim(spec.Path.Value, `"`)] = true
		}
		for _, p := range imports {
			require.True(t, have[p], "%s does not import %q, which the example imports", path, p)
		}
	}
	require.NotEmpty(t, body, "an empty example")
	lines := strings.Split(string(src), "\n")
	for i := range lines {
		lines[i] = strings.TrimRight(lines[i], " \t\r")
	}
	for indent := 0; indent <= indentMax; indent++ {
		prefix := strings.Repeat("\t", indent)
		for start := 0; start+len(body) <= len(lines); start++ {
			if matches(lines[start:start+len(body)], body, prefix) {
				return
			}
		}
	}
	require.Failf(t, "example not compiled", "%s holds no copy of the example (its lines in order, at one indentation):\n%s",
		path, strings.Join(body, "\n"))
}

// matches reports whether lines are want with prefix before each line
// that is not blank.
func matches(lines, want []string, prefix string) bool {
	for i, w := range want {
		w = strings.TrimRight(w, " \t\r")
		if w == "" {
			if lines[i] != "" {
				return false
			}
			continue
		}
		if lines[i] != prefix+w {
			return false
		}
	}
	return true
}

// splitImports returns the paths of the import block snippet opens with
// (if any) and the lines after it, without the blank lines around them.
func splitImports(snippet []string) ([]string, []string) {
	rest := trimBlank(snippet)
	if len(rest) == 0 || !strings.HasPrefix(rest[0], "import") {
		return nil, rest
	}
	var paths []string
	if one, ok := strings.CutPrefix(rest[0], "import "); ok && !strings.HasPrefix(one, "(") {
		return []string{strings.Trim(strings.TrimSpace(one), `"`)}, trimBlank(rest[1:])
	}
	for i := 1; i < len(rest); i++ {
		line := strings.TrimSpace(rest[i])
		if line == ")" {
			return paths, trimBlank(rest[i+1:])
		}
		if line != "" {
			paths = append(paths, strings.Trim(line, `"`))
		}
	}
	return paths, nil
}

func trimBlank(lines []string) []string {
	for len(lines) > 0 && strings.TrimSpace(lines[0]) == "" {
		lines = lines[1:]
	}
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// RequirePackageDocIn fails t unless the package doc comment of the Go
// file at doc holds exactly one code block and the Go file at path holds
// a copy of it (RequireIn).
func RequirePackageDocIn(t testing.TB, doc, path string) {
	t.Helper()
	blocks := PackageDocBlocks(t, doc)
	require.Len(t, blocks, 1, "the package doc of %s has one example", doc)
	RequireIn(t, blocks[0], path)
}

// PackageDocBlocks returns the code blocks (lines indented by a tab) of
// the package doc comment of the Go file at path, each without that tab.
func PackageDocBlocks(t testing.TB, path string) [][]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments|parser.PackageClauseOnly)
	require.NoError(t, err)
	require.NotNil(t, f.Doc, "%s has no package doc comment", path)
	return commentBlocks(f.Doc)
}

func commentBlocks(doc *ast.CommentGroup) [][]string {
	var blocks [][]string
	var cur []string
	for _, line := range strings.Split(doc.Text(), "\n") {
		if code, ok := strings.CutPrefix(line, "\t"); ok {
			cur = append(cur, code)
			continue
		}
		if line == "" && cur != nil {
			cur = append(cur, "")
			continue
		}
		if cur = trimBlank(cur); len(cur) > 0 {
			blocks = append(blocks, cur)
		}
		cur = nil
	}
	if cur = trimBlank(cur); len(cur) > 0 {
		blocks = append(blocks, cur)
	}
	return blocks
}

package queue

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// protocolPackage is the package the stores sit beneath.
const protocolPackage = "github.com/leasehold/leasehold/queue"

// goList runs go list -f format on patterns and returns its lines, each
// split at "|".
func goList(t *testing.T, format string, patterns ...string) [][]string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list", "-f", format}, patterns...)...).Output()
	require.NoError(t, err, "go list %v", patterns)
	var rows [][]string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		rows = append(rows, strings.Split(line, "|"))
	}
	return rows
}

// TestStoresDoNotImportTheProtocol: by go list, no package beneath the
// protocol (queue/internal/...: the seam and the stores) depends on
// package queue, in its code (every package it imports, directly or not)
// or in its tests (every package they import, and what those depend
// on); and the seam depends on no store. The arrows run one way:
// queue -> stores -> seam.
func TestStoresDoNotImportTheProtocol(t *testing.T) {
	rows := goList(t, `{{.ImportPath}}|{{join .Deps " "}}|{{join .TestImports " "}} {{join .XTestImports " "}}`, "./internal/...")
	var stores []string
	for _, r := range rows {
		if r[0] != protocolPackage+"/internal/seam" {
			stores = append(stores, r[0])
		}
	}
	require.Contains(t, stores, protocolPackage+"/internal/sqlite")
	require.Contains(t, stores, protocolPackage+"/internal/postgres")
	for _, r := range rows {
		pkg, deps, testImports := r[0], strings.Fields(r[1]), strings.Fields(r[2])
		require.NotContains(t, deps, protocolPackage, "%s depends on the protocol", pkg)
		if pkg == protocolPackage+"/internal/seam" {
			for _, s := range stores {
				require.NotContains(t, deps, s, "the seam depends on a store")
			}
		}
		if len(testImports) == 0 {
			continue
		}
		for _, dep := range goList(t, `{{.ImportPath}}|{{join .Deps " "}}`, testImports...) {
			require.False(t, dep[0] == protocolPackage || slices.Contains(strings.Fields(dep[1]), protocolPackage),
				"%s's tests import %s, which depends on the protocol", pkg, dep[0])
		}
	}
}

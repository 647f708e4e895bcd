package client_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/doctest"
)

// TestPackageDocExampleIsCompiled: the package doc's example is the first
// lines of submitAndFollow in example_test.go, which compiles.
func TestPackageDocExampleIsCompiled(t *testing.T) {
	blocks := doctest.PackageDocBlocks(t, "doc.go")
	require.Len(t, blocks, 1)
	doctest.RequireIn(t, blocks[0], "example_test.go")
}

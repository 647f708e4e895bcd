package worker_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/doctest"
)

// TestPackageDocExampleIsCompiled: the package doc's "Stepping a worker"
// is a copy of drive in step_example_test.go, which compiles.
func TestPackageDocExampleIsCompiled(t *testing.T) {
	blocks := doctest.PackageDocBlocks(t, "doc.go")
	require.Len(t, blocks, 1)
	doctest.RequireIn(t, blocks[0], "step_example_test.go")
}

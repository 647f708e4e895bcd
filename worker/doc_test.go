package worker_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/doctest"
)

// TestPackageDocExampleIsCompiled: the package doc's "Several kinds" is
// a copy of serveTwoKinds in example_test.go, and its "Stepping a worker"
// of drive in step_example_test.go, which compile.
func TestPackageDocExampleIsCompiled(t *testing.T) {
	blocks := doctest.PackageDocBlocks(t, "doc.go")
	require.Len(t, blocks, 2)
	doctest.RequireIn(t, blocks[0], "example_test.go")
	doctest.RequireIn(t, blocks[1], "step_example_test.go")
}

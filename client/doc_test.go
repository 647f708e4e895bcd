package client_test

import (
	"testing"

	"github.com/leasehold/leasehold/internal/doctest"
)

// TestPackageDocExampleIsCompiled: the package doc's example is the first
// lines of submitAndFollow in example_test.go, which compiles.
func TestPackageDocExampleIsCompiled(t *testing.T) {
	doctest.RequirePackageDocIn(t, "doc.go", "example_test.go")
}

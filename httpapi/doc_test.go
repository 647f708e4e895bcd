package httpapi_test

import (
	"testing"

	"github.com/leasehold/leasehold/internal/doctest"
)

// TestPackageDocExampleIsCompiled: the package doc's example is
// serveInvoices in example_test.go, which compiles and which Example
// runs against a real listener.
func TestPackageDocExampleIsCompiled(t *testing.T) {
	doctest.RequirePackageDocIn(t, "doc.go", "example_test.go")
}

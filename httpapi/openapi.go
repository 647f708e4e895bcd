package httpapi

import (
	_ "embed"
	"net/http"
)

// Document is the OpenAPI 3 document of the API, served at /openapi.json.
// The conformance test checks every request and response of the server
// tests against it, so it cannot drift from the routes.
//
//go:embed openapi.json
var Document []byte

func serveDocument(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(Document)
}

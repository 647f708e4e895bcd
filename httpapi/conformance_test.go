package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/leasehold/leasehold/wire"
)

// The conformance check: every request the server tests send through
// setupAPI's client, and every answer, is checked against the OpenAPI
// document (openapi.json) by kin-openapi. An accepted request (2xx) must
// be one the document describes; every answer must be one the document
// lists for its operation, with a body of the listed schema (errors
// included). A request outside the document must get a JSON 404 or 405.
// At the end of a full run, every operation of the document must have
// been exercised, so a route cannot go undocumented or untested.

var (
	docOnce   sync.Once
	docParsed *openapi3.T
	docRouter routers.Router
	docErr    error

	exercisedMu sync.Mutex
	exercised   = map[string]bool{} // operation IDs answered with a 2xx
)

func loadDocument() (*openapi3.T, routers.Router, error) {
	docOnce.Do(func() {
		loader := openapi3.NewLoader()
		docParsed, docErr = loader.LoadFromData(Document)
		if docErr != nil {
			return
		}
		if docErr = docParsed.Validate(context.Background()); docErr != nil {
			return
		}
		docParsed.Servers = nil // route by path alone, whatever the test's port
		docRouter, docErr = legacy.NewRouter(docParsed)
	})
	return docParsed, docRouter, docErr
}

// conformance is a RoundTripper that checks each exchange.
type conformance struct {
	t    *testing.T
	next http.RoundTripper
}

func (c *conformance) RoundTrip(req *http.Request) (*http.Response, error) {
	_, router, err := loadDocument()
	if err != nil {
		c.t.Errorf("openapi.json: %v", err)
		return nil, err
	}
	var reqBody []byte
	if req.Body != nil {
		reqBody, err = io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	resp, err := c.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	where := fmt.Sprintf("%s %s -> %d", req.Method, req.URL.RequestURI(), resp.StatusCode)
	if resp.StatusCode == http.StatusRequestHeaderFieldsTooLarge {
		// net/http answers headers past MaxHeaderBytes itself, in plain
		// text, before any handler (or this document) is involved.
		return resp, nil
	}
	check := req.Clone(req.Context())
	check.Body = io.NopCloser(bytes.NewReader(reqBody))
	route, params, ferr := router.FindRoute(check)
	if ferr != nil {
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
			c.t.Errorf("conformance: %s: a request outside the document was answered: %v", where, ferr)
		}
		return c.checkBody(resp, where, func(body []byte) {
			var e wire.Error
			if json.Unmarshal(body, &e) != nil || e.Error == "" || e.Code == "" {
				c.t.Errorf("conformance: %s: not a JSON error: %s", where, body)
			}
		})
	}
	input := &openapi3filter.RequestValidationInput{Request: check, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true}}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if err := openapi3filter.ValidateRequest(req.Context(), input); err != nil {
			c.t.Errorf("conformance: %s: the server accepted a request the document refuses: %v", where, err)
		}
		exercisedMu.Lock()
		exercised[route.Operation.OperationID] = true
		exercisedMu.Unlock()
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		if route.Operation.OperationID != "followEvents" {
			c.t.Errorf("conformance: %s: an event stream from %s", where, route.Operation.OperationID)
		}
		return resp, nil // the body is a stream, read by the test
	}
	return c.checkBody(resp, where, func(body []byte) {
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: input, Status: resp.StatusCode,
			Header: resp.Header, Body: io.NopCloser(bytes.NewReader(body)), Options: input.Options}
		if err := openapi3filter.ValidateResponse(req.Context(), out); err != nil {
			c.t.Errorf("conformance: %s: the answer is not as documented: %v\n%s", where, err, body)
		}
	})
}

// checkBody reads the whole response body, runs check on it and puts it
// back for the test.
func (c *conformance) checkBody(resp *http.Response, where string, check func([]byte)) (*http.Response, error) {
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("%s: read body: %w", where, err)
	}
	check(body)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// TestMain runs the tests, then (on a full, passing run) requires that
// every operation of the document was answered with a success at least
// once.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 && !filtered() {
		if missing := unexercised(); len(missing) > 0 {
			fmt.Fprintf(os.Stderr, "conformance: operations of openapi.json no test exercised with a success: %s\n", strings.Join(missing, ", "))
			code = 1
		}
	}
	os.Exit(code)
}

// filtered reports whether the run selects tests (-run, -fuzz), when not
// every operation is expected.
func filtered() bool {
	return slices.ContainsFunc(os.Args[1:], func(a string) bool {
		return strings.HasPrefix(a, "-test.run") || strings.HasPrefix(a, "-test.fuzz") || strings.HasPrefix(a, "-test.skip") ||
			strings.HasPrefix(a, "-test.list")
	})
}

func unexercised() []string {
	doc, _, err := loadDocument()
	if err != nil {
		return []string{err.Error()}
	}
	exercisedMu.Lock()
	defer exercisedMu.Unlock()
	var missing []string
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			if !exercised[op.OperationID] {
				missing = append(missing, op.OperationID)
			}
		}
	}
	sort.Strings(missing)
	return missing
}

// TestDocumentIsServed: /openapi.json is the embedded document, valid
// OpenAPI 3, and names every route the mux has.
func TestDocumentIsServed(t *testing.T) {
	a := setupAPI(t)
	status, header, body := a.do(t, http.MethodGet, "/openapi.json", "", "")
	require200JSON(t, status, header)
	if !bytes.Equal(Document, body) {
		t.Fatal("/openapi.json is not the embedded document")
	}
	doc, _, err := loadDocument()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/v1/tasks", "/v1/tasks/batch", "/v1/tasks/{id}", "/v1/events", "/v1/limits/users/{user}"} {
		if doc.Paths.Find(p) == nil {
			t.Errorf("the document has no path %s", p)
		}
	}
}

func require200JSON(t *testing.T, status int, header http.Header) {
	t.Helper()
	if status != http.StatusOK || header.Get("Content-Type") != "application/json" {
		t.Fatalf("want 200 application/json, got %d %s", status, header.Get("Content-Type"))
	}
}

package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
)

// openAPISchemaFile is the OpenAPI Initiative's JSON Schema of OpenAPI
// 3.0 documents (draft-04), committed with its source named in
// testdata/openapi-3.0-schema.SOURCE, so the check needs no network.
const openAPISchemaFile = "testdata/openapi-3.0-schema.json"

// compileOpenAPISchema compiles the committed schema. Its own "id" is an
// https URL; the compiler is given the document under it and has no
// loader for https, so nothing is fetched.
func compileOpenAPISchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open(openAPISchemaFile)
	require.NoError(t, err)
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	require.NoError(t, err)
	id, _ := doc.(map[string]any)["id"].(string)
	require.True(t, strings.HasPrefix(id, "https://spec.openapis.org/oas/3.0/schema/"), "not the OpenAPI 3.0 schema: id %q", id)
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource(id, doc))
	schema, err := c.Compile(id)
	require.NoError(t, err)
	return schema
}

// instanceLocations lists where in the document each leaf of a
// validation error points.
func instanceLocations(err error) []string {
	var v *jsonschema.ValidationError
	if !errors.As(err, &v) {
		return nil
	}
	var out []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			out = append(out, "/"+strings.Join(e.InstanceLocation, "/"))
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(v)
	return out
}

// TestDocumentMatchesOpenAPISchema: openapi.json is a valid OpenAPI 3.0
// document by the official JSON Schema, which holds rules kin-openapi's
// own validation does not (a schema's "required" must name at least one
// property).
func TestDocumentMatchesOpenAPISchema(t *testing.T) {
	schema := compileOpenAPISchema(t)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(Document))
	require.NoError(t, err)
	require.NoError(t, schema.Validate(doc), "openapi.json breaks the OpenAPI 3.0 schema at %v", instanceLocations(schema.Validate(doc)))
}

// TestOpenAPISchemaRefusesEmptyRequired: the check above can fail: a
// document whose schema has "required": [] is refused, the error
// pointing at that field.
func TestOpenAPISchemaRefusesEmptyRequired(t *testing.T) {
	schema := compileOpenAPISchema(t)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(Document, &doc))
	limitChange := doc["components"].(map[string]any)["schemas"].(map[string]any)["UserLimitChange"].(map[string]any)
	limitChange["required"] = []any{}
	err := schema.Validate(doc)
	require.Error(t, err)
	require.Contains(t, instanceLocations(err), "/components/schemas/UserLimitChange/required")
}

// documentSchema is the schema openapi.json names name.
func documentSchema(t *testing.T, name string) *openapi3.Schema {
	t.Helper()
	doc, _, err := loadDocument()
	require.NoError(t, err)
	ref := doc.Components.Schemas[name]
	require.NotNil(t, ref, "openapi.json has no schema %s", name)
	return ref.Value
}

// TestDocumentHoldsKindPayloadAndResult: the conformance check can fail
// on kind, payload and result. The document's Task refuses a record
// without its kind, with a kind no submit could name, with a result that
// is not a string or a field it does not describe; its Event refuses a
// task_kind of the wrong form; its SubmitRequest takes any JSON object
// as a payload (free-form, nested) and no kind but a well-formed one or
// none, and refuses a payload that is not an object.
func TestDocumentHoldsKindPayloadAndResult(t *testing.T) {
	decode := func(text string) map[string]any {
		t.Helper()
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(text), &v))
		return v
	}
	task := `{"id":"t_1","user":"ana","key":"k","kind":"report","payload":{"month":"2026-03","rows":[{"a":[1,null]}]},` +
		`"state":"completed","reason":"","version":1,"attempt":1,"attempts_charged":1,"attempts_max":3,"attempts_failed":0,` +
		`"cost_used":1,"cost_budget":5,"steps_used":1,"steps_max":2,"priority":0,"owner":"","lease_until":"","heartbeat_at":"",` +
		`"cancel_requested":false,"cancelled_by":"","approved_by":"","approval_gate":"","approval_version":0,"schedule_id":"",` +
		`"schedule_run":0,"last_error":"","result":"report written","run_at":"","deadline":"","created_at":"","updated_at":""}`
	schema := documentSchema(t, "Task")
	require.NoError(t, schema.VisitJSON(decode(task)), "a completed task of kind report, with its result")
	for name, edit := range map[string]func(map[string]any){
		"no kind":            func(r map[string]any) { delete(r, "kind") },
		"a kind in capitals": func(r map[string]any) { r["kind"] = "Report" },
		"a result number":    func(r map[string]any) { r["result"] = 42 },
		"a result object":    func(r map[string]any) { r["result"] = map[string]any{"ok": true} },
		"an extra field":     func(r map[string]any) { r["results"] = "report written" },
		"a list payload":     func(r map[string]any) { r["payload"] = []any{1} },
	} {
		r := decode(task)
		edit(r)
		require.Error(t, schema.VisitJSON(r), name)
	}

	event := decode(`{"seq":1,"task_id":"t_1","kind":"submitted","attempt":0,"fence":0,"op_id":"","from":"","to":"queued",` +
		`"reason":"","actor":"ana","user":"ana","task_kind":"report","at":"","detail":"","scope":""}`)
	require.NoError(t, documentSchema(t, "Event").VisitJSON(event))
	event["task_kind"] = "no such kind!"
	require.Error(t, documentSchema(t, "Event").VisitJSON(event))

	submit := documentSchema(t, "SubmitRequest")
	for body, ok := range map[string]bool{
		`{"user":"ana","key":"k","kind":"report","payload":{"a":{"b":[1,"x",null,{"c":true}]}},"cost_budget":1,"steps_max":1}`: true,
		`{"user":"ana","key":"k","kind":"","payload":{},"cost_budget":1,"steps_max":1}`:                                        true,
		`{"user":"ana","key":"k","payload":{},"cost_budget":1,"steps_max":1}`:                                                  true,
		`{"user":"ana","key":"k","kind":"Report","payload":{},"cost_budget":1,"steps_max":1}`:                                  false,
		`{"user":"ana","key":"k","kind":"report","payload":[1,2],"cost_budget":1,"steps_max":1}`:                               false,
		`{"user":"ana","key":"k","kind":"report","payload":"text","cost_budget":1,"steps_max":1}`:                              false,
	} {
		err := submit.VisitJSON(decode(body))
		if ok {
			require.NoError(t, err, body)
		} else {
			require.Error(t, err, body)
		}
	}
}

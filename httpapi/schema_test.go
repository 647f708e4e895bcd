package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

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

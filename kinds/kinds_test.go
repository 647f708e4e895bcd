package kinds_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/kinds"
	"github.com/leasehold/leasehold/model"
)

const goodFile = `{
  "kinds": {
    "report": {
      "schema": {
        "type": "object",
        "required": ["month", "customer"],
        "additionalProperties": false,
        "properties": {
          "month": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}$"},
          "customer": {"type": "object", "required": ["email"],
                       "properties": {"email": {"type": "string", "format": "email"},
                                      "tier": {"enum": ["gold", "silver"]}}},
          "lines": {"type": "array", "items": {"type": "object",
                    "properties": {"amount": {"type": "integer", "maximum": 1000}}}},
          "note": {"type": "string", "maxLength": 8},
          "code": {"const": "fixed"}
        }
      },
      "defaults": {"lease": "2s", "attempts_max": 4, "budget": 9, "steps_max": 3, "timeout": "1m"},
      "worker": {"command": ["python3", "report.py", "--fast"], "service": "dedup"}
    },
    "free": {},
    "charge": {
      "worker": {"command": ["sh", "charge.sh"], "service": "queryable", "reconcile": ["sh", "check.sh"],
                 "grace": "3s", "dir": "scripts"}
    },
    "notify": {"worker": {"command": ["/bin/true"], "service": "none"}}
  }
}`

func parse(t *testing.T, data string) *kinds.File {
	t.Helper()
	f, err := kinds.Parse([]byte(data), "/srv/jobs")
	require.NoError(t, err)
	return f
}

func TestParseReadsEveryMember(t *testing.T) {
	f := parse(t, goodFile)
	require.Equal(t, []string{"charge", "free", "notify", "report"}, f.Names())

	report, ok := f.Kind("report")
	require.True(t, ok)
	require.NotNil(t, report.Schema)
	require.Equal(t, kinds.Defaults{Lease: 2 * time.Second, AttemptsMax: 4, CostBudget: 9, StepsMax: 3, Timeout: time.Minute}, report.Defaults)
	require.Equal(t, &kinds.Worker{Command: []string{"python3", "report.py", "--fast"}, Dir: "/srv/jobs",
		Service: kinds.ServiceDedup, Grace: kinds.GraceDefault}, report.Worker)

	charge, _ := f.Kind("charge")
	require.Nil(t, charge.Schema)
	require.Equal(t, &kinds.Worker{Command: []string{"sh", "charge.sh"}, Dir: "/srv/jobs/scripts",
		Service: kinds.ServiceQueryable, Reconcile: []string{"sh", "check.sh"}, Grace: 3 * time.Second}, charge.Worker)

	free, _ := f.Kind("free")
	require.Nil(t, free.Worker)
	require.Equal(t, kinds.Defaults{}, free.Defaults)
	_, ok = f.Kind("synthetic")
	require.False(t, ok)
}

func TestLoadTakesDirFromTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kinds.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"kinds": {"a": {"worker": {"command": ["x"], "service": "none", "dir": "sub"}}}}`), 0o600))
	f, err := kinds.Load(path)
	require.NoError(t, err)
	a, _ := f.Kind("a")
	require.Equal(t, filepath.Join(dir, "sub"), a.Worker.Dir)

	_, err = kinds.Load(filepath.Join(dir, "missing.json"))
	require.Error(t, err)
}

// TestParseRefuses: each bad file is refused with an error naming where.
func TestParseRefuses(t *testing.T) {
	cases := []struct {
		name, file, want string
	}{
		{"not JSON", `{"kinds": `, "not well-formed JSON"},
		{"no kinds", `{}`, "kinds: required"},
		{"unknown top member", `{"kinds": {}, "extra": 1}`, `unknown field "extra"`},
		{"duplicate kind", `{"kinds": {"a": {}, "a": {}}}`, "kinds.a: the key appears twice"},
		{"duplicate deep in a schema", `{"kinds": {"a": {"schema": {"properties": {"x": {"type": "string", "type": "integer"}}}}}}`,
			"kinds.a.schema.properties.x.type: the key appears twice"},
		{"unknown kind member", `{"kinds": {"a": {"schemas": {}}}}`, `kinds.a: unknown field "schemas"`},
		{"unknown worker member", `{"kinds": {"a": {"worker": {"command": ["x"], "service": "none", "argv": []}}}}`, `kinds.a.worker: unknown field "argv"`},
		{"unknown default", `{"kinds": {"a": {"defaults": {"retries": 2}}}}`, `kinds.a.defaults: unknown field "retries"`},
		{"upper-case name", `{"kinds": {"Report": {}}}`, "character 'R' at offset 0 is not allowed"},
		{"bad byte in name", `{"kinds": {"re port": {}}}`, "character ' ' at offset 2 is not allowed"},
		{"synthetic", `{"kinds": {"synthetic": {}}}`, "synthetic is built in"},
		{"bad schema type", `{"kinds": {"a": {"schema": {"type": 12}}}}`, "kinds.a.schema: not a valid JSON Schema"},
		{"bad schema keyword", `{"kinds": {"a": {"schema": {"minimum": "five"}}}}`, "kinds.a.schema: not a valid JSON Schema"},
		{"schema ref outside", `{"kinds": {"a": {"schema": {"$ref": "file:///etc/passwd"}}}}`, "kinds.a.schema: not a valid JSON Schema"},
		{"no command", `{"kinds": {"a": {"worker": {"service": "dedup"}}}}`, "kinds.a.worker.command: required"},
		{"empty program", `{"kinds": {"a": {"worker": {"command": [""], "service": "dedup"}}}}`, "kinds.a.worker.command[0]"},
		{"command not strings", `{"kinds": {"a": {"worker": {"command": "python3 x.py", "service": "dedup"}}}}`, "command: must be a JSON array"},
		{"no service", `{"kinds": {"a": {"worker": {"command": ["x"]}}}}`, "kinds.a.worker.service: required"},
		{"unknown service", `{"kinds": {"a": {"worker": {"command": ["x"], "service": "exactly-once"}}}}`, "kinds.a.worker.service: must be one of"},
		{"fenced without reconcile", `{"kinds": {"a": {"worker": {"command": ["x"], "service": "fenced"}}}}`, "kinds.a.worker.reconcile: required"},
		{"queryable without reconcile", `{"kinds": {"a": {"worker": {"command": ["x"], "service": "queryable"}}}}`, "kinds.a.worker.reconcile: required"},
		{"reconcile for dedup", `{"kinds": {"a": {"worker": {"command": ["x"], "service": "dedup", "reconcile": ["y"]}}}}`, "kinds.a.worker.reconcile: only a queryable"},
		{"bad grace", `{"kinds": {"a": {"worker": {"command": ["x"], "service": "none", "grace": "forever"}}}}`, "kinds.a.worker.grace: must be a positive duration"},
		{"negative timeout", `{"kinds": {"a": {"defaults": {"timeout": "-1s"}}}}`, "kinds.a.defaults.timeout"},
		{"lease too short", `{"kinds": {"a": {"defaults": {"lease": "1ms"}}}}`, "kinds.a.defaults.lease"},
		{"attempts zero", `{"kinds": {"a": {"defaults": {"attempts_max": 0}}}}`, "kinds.a.defaults.attempts_max: must be from 1"},
		{"budget negative", `{"kinds": {"a": {"defaults": {"budget": -1}}}}`, "kinds.a.defaults.budget"},
		{"kind not an object", `{"kinds": {"a": []}}`, "kinds.a: must be a JSON object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := kinds.Parse([]byte(c.file), "/srv")
			require.ErrorIs(t, err, kinds.ErrInvalidFile)
			require.ErrorContains(t, err, c.want)
		})
	}
}

func TestParseRefusesTooLargeAndTooMany(t *testing.T) {
	_, err := kinds.Parse(bytes.Repeat([]byte(" "), kinds.FileBytesMax+1), "/")
	require.ErrorIs(t, err, kinds.ErrInvalidFile)

	var b strings.Builder
	b.WriteString(`{"kinds": {`)
	for i := 0; i <= kinds.KindsMax; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"k` + strconv.Itoa(i) + `": {}`)
	}
	b.WriteString(`}}`)
	_, err = kinds.Parse([]byte(b.String()), "/")
	require.ErrorContains(t, err, "kinds: 257 kinds (limit 256)")
}

func TestSchemaMayNameItsDraft(t *testing.T) {
	f := parse(t, `{"kinds": {"a": {"schema": {"$schema": "http://json-schema.org/draft-07/schema#",
		"type": "object", "properties": {"n": {"type": "integer"}}, "definitions": {"x": {"type": "string"}}}}}}`)
	require.NoError(t, f.Validate("a", []byte(`{"n": 3}`)))
	require.Error(t, f.Validate("a", []byte(`{"n": "3"}`)))
}

// refused returns the field and problem of a payload refusal.
func refused(t *testing.T, err error) (string, string) {
	t.Helper()
	var v *model.ValidationError
	require.ErrorAs(t, err, &v)
	require.ErrorIs(t, err, model.ErrInvalidInput)
	return v.Field, v.Problem
}

func TestValidateNamesPathAndRule(t *testing.T) {
	f := parse(t, goodFile)
	ok := `{"month": "2026-11", "customer": {"email": "a@example.com"}, "lines": [{"amount": 3}]}`
	require.NoError(t, f.Validate("report", []byte(ok)))

	cases := []struct {
		name, payload, field, problem string
	}{
		{"missing top", `{"customer": {"email": "a@example.com"}}`, "month", "required by the schema"},
		{"missing nested", `{"month": "2026-11", "customer": {}}`, "customer.email", "required by the schema"},
		{"pattern", `{"month": "November", "customer": {"email": "a@example.com"}}`, "month", "breaks the schema's pattern rule"},
		{"type", `{"month": 202611, "customer": {"email": "a@example.com"}}`, "month", "breaks the schema's type rule"},
		{"array item", `{"month": "2026-11", "customer": {"email": "a@example.com"}, "lines": [{"amount": 3}, {"amount": 5000}]}`,
			"lines[1].amount", "breaks the schema's maximum rule"},
		{"format", `{"month": "2026-11", "customer": {"email": "not an address"}}`, "customer.email", "breaks the schema's format rule"},
		{"enum", `{"month": "2026-11", "customer": {"email": "a@example.com", "tier": "platinum"}}`, "customer.tier", "breaks the schema's enum rule"},
		{"additional", `{"month": "2026-11", "customer": {"email": "a@example.com"}, "extra": 1}`, "extra", "not allowed by the schema (additionalProperties)"},
		{"not an object", `[1, 2]`, "payload", "must be a JSON object"},
		{"scalar", `"text"`, "payload", "must be a JSON object"},
		{"malformed", `{"month": `, "payload", "not well-formed JSON"},
		{"duplicate key", `{"month": "2026-11", "customer": {"email": "a@example.com", "email": "b@example.com"}}`, "customer.email", "the key appears twice in one object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			field, problem := refused(t, f.Validate("report", []byte(c.payload)))
			require.Equal(t, c.field, field)
			require.Equal(t, c.problem, problem)
		})
	}
}

// TestValidateNeverQuotesAValue: for each rule, a payload whose refused
// value is a secret gets an error without it, while the schema library's
// own messages quote it for some (so the test would catch a message
// passed on).
func TestValidateNeverQuotesAValue(t *testing.T) {
	const secret = "sk_live_5ecret"
	f := parse(t, goodFile)
	report, _ := f.Kind("report")
	compiled := compileRaw(t, report.Schema)
	payloads := []string{
		`{"month": "` + secret + `", "customer": {"email": "a@example.com"}}`,
		`{"month": "2026-11", "customer": {"email": "` + secret + `"}}`,
		`{"month": "2026-11", "customer": {"email": "a@example.com", "tier": "` + secret + `"}}`,
		`{"month": "2026-11", "customer": {"email": "a@example.com"}, "note": "` + secret + `"}`,
		`{"month": "2026-11", "customer": {"email": "a@example.com"}, "code": "` + secret + `"}`,
	}
	quoted := 0
	for _, p := range payloads {
		err := f.Validate("report", []byte(p))
		require.Error(t, err)
		require.NotContains(t, err.Error(), secret)
		var doc any
		require.NoError(t, json.Unmarshal([]byte(p), &doc))
		libErr := compiled.Validate(doc)
		require.Error(t, libErr)
		if strings.Contains(libErr.Error(), secret) {
			quoted++
		}
	}
	require.Positive(t, quoted, "the library's messages no longer quote values: the test cannot tell")
}

func compileRaw(t *testing.T, raw json.RawMessage) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	require.NoError(t, c.AddResource("urn:test", doc))
	s, err := c.Compile("urn:test")
	require.NoError(t, err)
	return s
}

func TestKindWithoutSchemaTakesAnyObject(t *testing.T) {
	f := parse(t, goodFile)
	require.NoError(t, f.Validate("free", []byte(`{"anything": [1, {"x": null}]}`)))
	require.NoError(t, f.Validate("free", []byte(`{}`)))
	field, _ := refused(t, f.Validate("free", []byte(`[]`)))
	require.Equal(t, "payload", field)
	field, _ = refused(t, f.Validate("free", []byte(`{"a": {"b": 1, "b": 2}}`)))
	require.Equal(t, "a.b", field)
}

func TestValidatorByKind(t *testing.T) {
	f := parse(t, goodFile)
	require.Nil(t, f.Validator("nope"))
	err := f.Validate("nope", []byte(`{}`))
	require.ErrorIs(t, err, kinds.ErrUnknownKind)

	v := f.Validator("report")
	require.NotNil(t, v)
	field, _ := refused(t, v(json.RawMessage(`{"customer": {"email": "a@example.com"}}`)))
	require.Equal(t, "month", field)
	require.True(t, errors.Is(v(json.RawMessage(`1`)), model.ErrInvalidInput))
}

func TestCheckName(t *testing.T) {
	for _, good := range []string{"a", "report", "mail.send", "etl_v2", "a-1", strings.Repeat("a", kinds.KindNameMax)} {
		require.NoError(t, kinds.CheckName(good), good)
	}
	for _, bad := range []string{"", "1a", "_a", "A", "a b", "a/b", "synthetic", "é", strings.Repeat("a", kinds.KindNameMax+1)} {
		require.Error(t, kinds.CheckName(bad), bad)
	}
}

// RequestDefaults holds, by kind, the budget and step limit intake fills
// in, for the kinds that give either; lease, timeout and attempts_max are
// not intake's.
func TestRequestDefaults(t *testing.T) {
	f, err := kinds.Parse([]byte(`{"kinds": {
	  "report": {"defaults": {"budget": 7, "steps_max": 3, "lease": "30s", "attempts_max": 5}},
	  "memo": {"defaults": {"steps_max": 2}},
	  "slow": {"defaults": {"timeout": "1m", "attempts_max": 2}},
	  "plain": {}}}`), t.TempDir())
	require.NoError(t, err)
	require.Equal(t, map[string]model.RequestDefaults{
		"report": {CostBudget: 7, StepsMax: 3},
		"memo":   {StepsMax: 2},
	}, f.RequestDefaults())
}

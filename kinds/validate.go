package kinds

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/leasehold/leasehold/internal/jsonkeys"
	"github.com/leasehold/leasehold/model"
)

// schemaURL is the name a kind's schema is compiled under: a URL no
// loader can reach, so a "$ref" resolves only inside the schema.
func schemaURL(kind string) string { return "urn:leasehold:kind:" + kind }

// noLoader refuses every external reference of a schema.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("a schema may refer only to itself, not to %s", url)
}

// compile compiles a kind's schema, asserting "format" (so that
// "format": "date" checks dates).
func compile(kind string, raw json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, errors.New("not well-formed JSON")
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	c.AssertFormat()
	if err := c.AddResource(schemaURL(kind), doc); err != nil {
		return nil, fmt.Errorf("not a JSON Schema: %v", err)
	}
	s, err := c.Compile(schemaURL(kind))
	if err != nil {
		return nil, fmt.Errorf("not a valid JSON Schema: %v", err)
	}
	return s, nil
}

// Validate checks payload against kind: a JSON object with no key
// repeated in one object that meets the kind's schema, if it has one. A
// refusal is a *model.ValidationError naming the path inside the payload
// and the rule broken, never a value; a kind not in the file is
// ErrUnknownKind.
func (f *File) Validate(kind string, payload []byte) error {
	k, ok := f.kinds[kind]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownKind, clip(kind))
	}
	return k.Validate(payload)
}

// Validator returns Validate of kind as a function, or nil when the kind
// is not in the file.
func (f *File) Validator(kind string) func(json.RawMessage) error {
	k, ok := f.kinds[kind]
	if !ok {
		return nil
	}
	return func(payload json.RawMessage) error { return k.Validate(payload) }
}

// Validate checks payload against the kind, as File.Validate does.
func (k *Kind) Validate(payload []byte) error {
	if err := jsonkeys.Check(payload); err != nil {
		var dup *jsonkeys.DuplicateError
		if errors.As(err, &dup) {
			return &model.ValidationError{Field: dup.Path, Problem: "the key appears twice in one object"}
		}
		return &model.ValidationError{Field: "payload", Problem: "not well-formed JSON"}
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return &model.ValidationError{Field: "payload", Problem: "not well-formed JSON"}
	}
	if _, ok := doc.(map[string]any); !ok {
		return &model.ValidationError{Field: "payload", Problem: "must be a JSON object"}
	}
	if k.compiled == nil {
		return nil
	}
	err = k.compiled.Validate(doc)
	if err == nil {
		return nil
	}
	var v *jsonschema.ValidationError
	if !errors.As(err, &v) {
		return &model.ValidationError{Field: "payload", Problem: "could not be checked against the schema"}
	}
	return refusal(v)
}

// refusal describes the first leaf of a schema failure: where in the
// payload, and which keyword. The library's messages can quote the value
// refused, so they are never used.
func refusal(v *jsonschema.ValidationError) error {
	for len(v.Causes) > 0 {
		v = v.Causes[0]
	}
	field := payloadPath(v.InstanceLocation)
	rule := "schema"
	if kw := v.ErrorKind.KeywordPath(); len(kw) > 0 {
		rule = strings.Join(kw, "/")
	}
	problem := "breaks the schema's " + rule + " rule"
	switch {
	case rule == "schema":
		problem = "breaks the schema"
	case rule == "required":
		if missing := missingOf(v.ErrorKind); missing != "" {
			field = joinPath(field, missing)
			problem = "required by the schema"
		}
	case rule == "additionalProperties":
		if extra := extraOf(v.ErrorKind); extra != "" {
			field = joinPath(field, extra)
			problem = "not allowed by the schema (additionalProperties)"
		}
	}
	return &model.ValidationError{Field: field, Problem: problem}
}

// missingOf returns the first property a required rule missed: a name
// the schema holds, never a value.
func missingOf(k jsonschema.ErrorKind) string {
	if r, ok := k.(*kind.Required); ok && len(r.Missing) > 0 {
		return r.Missing[0]
	}
	return ""
}

// extraOf returns the first property additionalProperties refused: a key
// of the payload, which a path names anyway.
func extraOf(k jsonschema.ErrorKind) string {
	if a, ok := k.(*kind.AdditionalProperties); ok && len(a.Properties) > 0 {
		return a.Properties[0]
	}
	return ""
}

// payloadPath renders an instance location as a path inside the payload:
// keys joined by ".", array indexes in brackets, "payload" for the whole.
func payloadPath(loc []string) string {
	if len(loc) == 0 {
		return "payload"
	}
	var b strings.Builder
	for _, seg := range loc {
		if _, err := strconv.Atoi(seg); err == nil && seg != "" && seg[0] != '-' {
			// An array index, or an object key of digits alone: written
			// as an index either way, which reads the same to a person.
			b.WriteString("[" + seg + "]")
			continue
		}
		writeKey(&b, seg)
	}
	return b.String()
}

// joinPath adds key below path ("payload" is the root).
func joinPath(path, key string) string {
	var b strings.Builder
	if path != "payload" {
		b.WriteString(path)
	}
	writeKey(&b, key)
	return b.String()
}

// writeKey appends key: .name for a plain name, ["..."] for any other,
// at most KindNameMax bytes of it.
func writeKey(b *strings.Builder, key string) {
	if plainKey(key) {
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(key)
		return
	}
	if len(key) > KindNameMax {
		key = key[:KindNameMax] + "..."
	}
	b.WriteString("[" + strconv.QuoteToASCII(key) + "]")
}

func plainKey(key string) bool {
	if key == "" || len(key) > KindNameMax {
		return false
	}
	return !slices.ContainsFunc([]byte(key), func(c byte) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-')
	})
}

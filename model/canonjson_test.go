package model

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCanonicalJSON(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{}`, `{}`},
		{` { } `, `{}`},
		{`[]`, `[]`},
		{`{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{"{\n\t\"b\" : [ 1 , 2 ] ,\r\n \"a\" : { \"d\" : null , \"c\" : true } }", `{"a":{"c":true,"d":null},"b":[1,2]}`},
		{`{"n":1.50,"m":1e3,"k":-0,"j":1E-2}`, `{"j":1E-2,"k":-0,"m":1e3,"n":1.50}`},
		{`{"s":"\u00e9\u003c\u0026\/"}`, `{"s":"é<&/"}`},
		{`{"s":"tab\tquote\"back\\nl\n"}`, `{"s":"tab\tquote\"back\\nl\n"}`},
		{`{"s":"\u2028\u0000"}`, `{"s":"\u2028\u0000"}`},
		{`{"":1,"a":[{"z":1,"y":[]}]}`, `{"":1,"a":[{"y":[],"z":1}]}`},
		{`{"B":1,"a":2,"é":3,"Z":4}`, `{"B":1,"Z":4,"a":2,"é":3}`},
		{`"x"`, `"x"`},
		{`false`, `false`},
	} {
		got, err := CanonicalJSON([]byte(tc.in))
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
		again, err := CanonicalJSON([]byte(got))
		require.NoError(t, err)
		require.Equal(t, got, again, "canonical form is a fixed point")
	}
}

func TestCanonicalJSONRefuses(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for _, tc := range []struct{ in, problem string }{
		{``, "empty"},
		{`   `, "empty"},
		{`{`, "malformed"},
		{`{"a":}`, "malformed"},
		{`{"a" 1}`, "malformed"},
		{`{"a":1,}`, "malformed"},
		{`[1,]`, "malformed"},
		{`{1:2}`, "malformed"},
		{`{'a':1}`, "malformed"},
		{`{"a":01}`, "malformed"},
		{`{"a":NaN}`, "malformed"},
		{`{"a":1,"a":1}`, "duplicate"},
		{`{"x":{"a":1,"b":2,"a":3}}`, "duplicate"},
		{`{"a":1}{}`, "trailing"},
		{`{"a":1} 2`, "trailing"},
		{`{"a":1}]`, "trailing"},
		{deep(JSONDepthMax + 1), "deeper"},
		{`{"a":` + deep(JSONDepthMax) + `}`, "deeper"},
	} {
		_, err := CanonicalJSON([]byte(tc.in))
		require.ErrorContains(t, err, tc.problem, "input %q", tc.in)
	}
	_, err := CanonicalJSON([]byte(deep(JSONDepthMax)))
	require.NoError(t, err, "exactly JSONDepthMax levels are allowed")
}

// FuzzCanonicalJSON checks, for any input the canonicalizer accepts: the
// input was valid JSON, the canonical form is valid JSON with the same
// value, canonicalizing it again changes nothing, and its hash is stable.
func FuzzCanonicalJSON(f *testing.F) {
	for _, seed := range []string{
		`{}`, `[]`, `{"b":1,"a":[true,false,null]}`, ` {"n" : 1.50e+3 } `, `{"s":"\u00e9\ud83d\ude00<&>"}`,
		`{"a":{"b":{"c":[1,[2,[3]]]}}}`, `{"a":1,"a":2}`, `{"a":1}x`, `[1,2`, `"\ud800"`, "\"\xff\"",
		`-0.0e-0`, `{"":""}`, strings.Repeat("[", 40) + strings.Repeat("]", 40),
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		canon, err := CanonicalJSON(raw)
		if err != nil {
			if json.Valid(raw) {
				msg := err.Error()
				require.True(t, strings.Contains(msg, "duplicate object key") || strings.Contains(msg, "nested deeper"),
					"valid JSON %q refused: %v", raw, err)
			}
			return
		}
		require.True(t, json.Valid(raw), "accepted invalid JSON %q", raw)
		require.True(t, json.Valid([]byte(canon)), "canonical form %q is not JSON", canon)
		require.Equal(t, decodeJSON(t, raw), decodeJSON(t, []byte(canon)), "value changed: %q -> %q", raw, canon)
		again, err := CanonicalJSON([]byte(canon))
		require.NoError(t, err)
		require.Equal(t, canon, again)
		// The same value spaced differently has the same canonical form.
		var spaced bytes.Buffer
		require.NoError(t, json.Indent(&spaced, raw, "\t", "  "))
		spaced.WriteString("\n ")
		other, err := CanonicalJSON(spaced.Bytes())
		require.NoError(t, err, "respaced %q", spaced.Bytes())
		require.Equal(t, sha256.Sum256([]byte(canon)), sha256.Sum256([]byte(other)), "%q and %q", raw, spaced.Bytes())
	})
}

// TestCanonicalJSONHashesEqual: inputs that differ only in key order and
// spacing have one canonical form, so requests carrying them hash alike;
// a different value does not.
func TestCanonicalJSONHashesEqual(t *testing.T) {
	for _, pair := range [][2]string{
		{`{"b":1,"a":[1,2]}`, " {\n\t\"a\" : [ 1 ,2 ] ,  \"b\":1 }\r\n"},
		{`{"x":{"d":null,"c":true},"é":"\u00e9"}`, `{"\u00e9":"é", "x":{"c":true, "d":null}}`},
	} {
		a, err := CanonicalJSON([]byte(pair[0]))
		require.NoError(t, err)
		b, err := CanonicalJSON([]byte(pair[1]))
		require.NoError(t, err)
		require.Equal(t, sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b)), "%s and %s", pair[0], pair[1])
		na, err := Normalize(SubmitRequest{User: "ana", Key: "k", Payload: pair[0], CostBudget: 1, StepsMax: 1})
		require.NoError(t, err)
		nb, err := Normalize(SubmitRequest{User: "ana", Key: "k", Payload: pair[1], CostBudget: 1, StepsMax: 1})
		require.NoError(t, err)
		require.Equal(t, na.Hash, nb.Hash, "a replay with the payload reordered is the same request")
	}
	a, err := CanonicalJSON([]byte(`{"a":1,"b":2}`))
	require.NoError(t, err)
	b, err := CanonicalJSON([]byte(`{"a":2,"b":1}`))
	require.NoError(t, err)
	require.NotEqual(t, sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b)))
}

func decodeJSON(t *testing.T, raw []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	require.NoError(t, dec.Decode(&v))
	return v
}

func TestDecodeJSONComparesNumbersAsWritten(t *testing.T) {
	// The fuzz property compares numbers as written, so it would notice a
	// canonicalizer that reformats them.
	require.False(t, reflect.DeepEqual(decodeJSON(t, []byte(`1.0`)), decodeJSON(t, []byte(`1`))))
}

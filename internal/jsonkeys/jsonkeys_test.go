package jsonkeys_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/jsonkeys"
)

// TestCheckNamesTheRepeatedKeysPath: a key repeated in one object, at any
// depth, is found and named by its path; the message holds no value.
func TestCheckNamesTheRepeatedKeysPath(t *testing.T) {
	for _, tc := range []struct{ doc, path string }{
		{`{"user":"fz","user":"other"}`, "user"},
		{`{"user":"fz","payload":{"a":1,"b":{"c":[1,{"d":2,"d":3}]}}}`, "payload.b.c[1].d"},
		{`{"tasks":[{"user":"a"},{"user":"b","key":"k","user":"c"}]}`, "tasks[1].user"},
		{`[[1,2],[3,{"x":[],"x":{}}]]`, "[1][1].x"},
		{`{"a b":{"c.d":1,"c.d":2}}`, `["a b"]["c.d"]`},
		{`{"":1,"":2}`, `[""]`},
		{`{"k":"v"}` + "\n" + `{"k":1,"j":2,"k":3}`, "k"},
		{`{"` + strings.Repeat("k", 80) + `":1,"` + strings.Repeat("k", 80) + `":2}`, `["` + strings.Repeat("k", 64) + `..."]`},
	} {
		err := jsonkeys.Check([]byte(tc.doc))
		var dup *jsonkeys.DuplicateError
		require.ErrorAs(t, err, &dup, tc.doc)
		require.Equal(t, tc.path, dup.Path, tc.doc)
		require.ErrorIs(t, err, jsonkeys.ErrDuplicate)
		require.Equal(t, "key "+tc.path+" appears twice in one object", err.Error())
		for _, value := range []string{"fz", "other"} {
			require.NotContains(t, err.Error(), value)
		}
	}
}

// TestCheckAcceptsDistinctKeys: equal keys in different objects, and
// values equal to keys, are no repeat.
func TestCheckAcceptsDistinctKeys(t *testing.T) {
	for _, doc := range []string{
		`{}`, `[]`, `1`, `"x"`, `null`, ``, " \n ",
		`{"a":{"a":{"a":1}},"b":[{"a":1},{"a":2}]}`,
		`{"a":"a","b":["a","a"],"c":{"b":1}}`,
		`{"a":1}` + "\n" + `{"a":2}`,
		`{"A":1,"a":2}`,
	} {
		require.NoError(t, jsonkeys.Check([]byte(doc)), doc)
	}
}

// TestCheckRefusesMalformedJSON: a document that is not JSON is refused
// as malformed, saying where and quoting nothing of it.
func TestCheckRefusesMalformedJSON(t *testing.T) {
	for _, doc := range []string{`{"secret":`, `{"a":1,}`, `{"a" 1}`, `[1,2`, `{"s3cret"}`} {
		err := jsonkeys.Check([]byte(doc))
		require.ErrorIs(t, err, jsonkeys.ErrMalformed, doc)
		require.False(t, errors.Is(err, jsonkeys.ErrDuplicate))
		require.NotContains(t, err.Error(), "secret", doc)
		require.NotContains(t, err.Error(), "s3cret", doc)
	}
}

// FuzzCheck: Check never panics, and a repeat it reports names a path.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{`{"a":1,"a":2}`, `{"a":[{"b":1},{"b":2,"b":3}]}`, `[1,{"x":{}}]`, `{"a":`, `}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		err := jsonkeys.Check([]byte(doc))
		var dup *jsonkeys.DuplicateError
		if errors.As(err, &dup) {
			require.NotEmpty(t, dup.Path)
		}
	})
}

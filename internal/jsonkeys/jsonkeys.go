// Package jsonkeys finds a key repeated within one JSON object, at any
// depth. encoding/json keeps the last of two equal keys without a word, so
// {"user":"a","user":"b"} decodes as user b, while a proxy in front that
// reads the first key sees user a. Every JSON document leasehold reads
// (request bodies, batch lines, payloads, and any file of settings) is
// checked here before it is used, and refused when a key repeats.
//
// A refusal names the key's path (user, payload.steps[2].cost) and never
// a value: a payload may carry secrets.
//
// # Usage
//
//	if err := jsonkeys.Check(data); err != nil {
//		var dup *jsonkeys.DuplicateError
//		if errors.As(err, &dup) { ... dup.Path ... }
//	}
package jsonkeys

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ErrDuplicate is what a *DuplicateError unwraps to.
var ErrDuplicate = errors.New("a JSON key appears twice in one object")

// ErrMalformed: the document is not well-formed JSON. Its message says
// where (a byte offset), never what is there.
var ErrMalformed = errors.New("malformed JSON")

// keyBytesMax bounds how much of one key a path quotes.
const keyBytesMax = 64

// DuplicateError names the path of a key that appears twice in one
// object: its keys from the document's root joined by ".", array indexes
// in brackets, a key that is not a plain name quoted in brackets
// (payload["a b"]).
type DuplicateError struct {
	Path string
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("key %s appears twice in one object", e.Path)
}

// Unwrap returns ErrDuplicate.
func (e *DuplicateError) Unwrap() error { return ErrDuplicate }

// Check returns a *DuplicateError for the first key of data that repeats
// a key of the same object, nil when no key repeats. data may hold one
// JSON value or several in a row (JSON lines); a document that is not
// well-formed JSON is an ErrMalformed error.
func Check(data []byte) error {
	return CheckReader(bytes.NewReader(data))
}

// CheckReader is Check of what r holds, to its end.
func CheckReader(r io.Reader) error {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	var stack []*level // the objects and arrays open, outermost first
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			if len(stack) > 0 {
				return fmt.Errorf("%w: the document ends inside a value", ErrMalformed)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w at byte %d", ErrMalformed, dec.InputOffset())
		}
		n := len(stack)
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:n-1]
			valueDone(stack)
			continue
		}
		if n > 0 && stack[n-1].object && stack[n-1].expectKey {
			top := stack[n-1]
			key := tok.(string) // where a key is due the decoder returns nothing else
			if _, seen := top.keys[key]; seen {
				return &DuplicateError{Path: path(stack, key)}
			}
			top.keys[key] = struct{}{}
			top.key, top.expectKey = key, false
			continue
		}
		if n > 0 && !stack[n-1].object {
			stack[n-1].index++ // a value of the array begins
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &level{object: true, expectKey: true, keys: map[string]struct{}{}})
		case json.Delim('['):
			stack = append(stack, &level{index: -1})
		default:
			valueDone(stack)
		}
	}
}

// level is one open object or array.
type level struct {
	object    bool
	expectKey bool                // an object waiting for its next key (or its end)
	keys      map[string]struct{} // an object's keys so far
	key       string              // an object's key whose value is being read
	index     int                 // an array's index of the value being read
}

// valueDone records that the value being read in the innermost open
// object or array has ended: an object then waits for its next key.
func valueDone(stack []*level) {
	if n := len(stack); n > 0 && stack[n-1].object {
		stack[n-1].expectKey = true
	}
}

// path renders the path of key inside the innermost level of stack.
func path(stack []*level, key string) string {
	var b strings.Builder
	for _, l := range stack[:len(stack)-1] {
		if l.object {
			writeKey(&b, l.key)
		} else {
			fmt.Fprintf(&b, "[%d]", l.index)
		}
	}
	writeKey(&b, key)
	return b.String()
}

// writeKey appends key to a path: .name for a plain name (no dot before
// the first), ["..."] for any other, at most keyBytesMax bytes of it.
func writeKey(b *strings.Builder, key string) {
	if plain(key) {
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(key)
		return
	}
	if len(key) > keyBytesMax {
		key = key[:keyBytesMax] + "..."
	}
	b.WriteString("[" + strconv.QuoteToASCII(key) + "]")
}

// plain reports whether key is a name a path may hold bare: 1 to
// keyBytesMax letters, digits, _ and -.
func plain(key string) bool {
	if key == "" || len(key) > keyBytesMax {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

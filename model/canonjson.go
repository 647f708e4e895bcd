package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
)

// JSONDepthMax bounds the nesting of arrays and objects in a payload.
const JSONDepthMax = 32

// CanonicalJSON returns the canonical form of a JSON document: no
// insignificant whitespace, object keys sorted, numbers kept exactly as
// written, strings re-escaped the same way. Duplicate keys, trailing data
// and nesting deeper than JSONDepthMax are refused. A refusal says where
// (a byte offset), never what the document holds there: payloads may
// carry secrets.
func CanonicalJSON(raw []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var out strings.Builder
	if err := canonValue(dec, &out, 0); err != nil {
		return "", err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return "", errors.New("trailing data after the JSON value")
	}
	return out.String(), nil
}

func canonValue(dec *json.Decoder, out *strings.Builder, depth int) error {
	tok, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("empty or truncated JSON")
		}
		return malformed(dec, err)
	}
	return canonToken(dec, out, tok, depth)
}

func canonToken(dec *json.Decoder, out *strings.Builder, tok json.Token, depth int) error {
	switch v := tok.(type) {
	case json.Delim:
		if depth >= JSONDepthMax {
			return fmt.Errorf("nested deeper than %d levels", JSONDepthMax)
		}
		if v == '{' {
			return canonObject(dec, out, depth+1)
		}
		if v == '[' {
			return canonArray(dec, out, depth+1)
		}
		return fmt.Errorf("malformed JSON: unexpected %q at byte %d", rune(v), dec.InputOffset())
	case string:
		writeJSONString(out, v)
	case json.Number:
		out.WriteString(v.String())
	case bool:
		if v {
			out.WriteString("true")
		} else {
			out.WriteString("false")
		}
	case nil:
		out.WriteString("null")
	default:
		return fmt.Errorf("malformed JSON at byte %d", dec.InputOffset())
	}
	return nil
}

func canonObject(dec *json.Decoder, out *strings.Builder, depth int) error {
	type member struct{ key, value string }
	var members []member
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return malformed(dec, err)
		}
		key, ok := tok.(string)
		if !ok {
			return fmt.Errorf("malformed JSON: an object key at byte %d is not a string", dec.InputOffset())
		}
		if seen[key] {
			return fmt.Errorf("duplicate object key at byte %d", dec.InputOffset())
		}
		seen[key] = true
		var value strings.Builder
		if err := canonValue(dec, &value, depth); err != nil {
			return err
		}
		members = append(members, member{key, value.String()})
	}
	if _, err := dec.Token(); err != nil {
		return malformed(dec, err)
	}
	sort.Slice(members, func(i, j int) bool { return members[i].key < members[j].key })
	out.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			out.WriteByte(',')
		}
		writeJSONString(out, m.key)
		out.WriteByte(':')
		out.WriteString(m.value)
	}
	out.WriteByte('}')
	return nil
}

func canonArray(dec *json.Decoder, out *strings.Builder, depth int) error {
	out.WriteByte('[')
	for i := 0; dec.More(); i++ {
		if i > 0 {
			out.WriteByte(',')
		}
		if err := canonValue(dec, out, depth); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return malformed(dec, err)
	}
	out.WriteByte(']')
	return nil
}

// malformed describes a decoding error by where it happened: the
// decoder's own message quotes the offending character.
func malformed(dec *json.Decoder, err error) error {
	var syntax *json.SyntaxError
	switch {
	case errors.As(err, &syntax):
		return fmt.Errorf("malformed JSON at byte %d", syntax.Offset)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("malformed JSON: truncated")
	}
	return fmt.Errorf("malformed JSON at byte %d", dec.InputOffset())
}

func writeJSONString(out *strings.Builder, s string) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	out.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}

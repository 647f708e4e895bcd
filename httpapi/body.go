package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/jsonkeys"
	"github.com/leasehold/leasehold/model"
)

// ranges are the inclusive ranges of a request body's integer fields, by
// their names on the wire. They word the refusal of a number that is not
// a whole number or does not fit; the queue checks the fields' values.
type ranges map[string]model.Range

// The integer fields of the request bodies.
var (
	submitRanges = ranges{
		"cost_budget": {Min: 1, Max: model.CostBudgetMax},
		"steps_max":   {Min: 1, Max: model.StepsMaxLimit},
		"priority":    {Min: model.PriorityMin, Max: model.PriorityMax},
	}
	approveRanges = ranges{"version": {Min: 0, Max: math.MaxInt64}}
	requeueRanges = ranges{
		"grant_cost":  {Min: 0, Max: model.CostBudgetMax},
		"grant_steps": {Min: 0, Max: model.StepsMaxLimit},
	}
	limitsRanges    = ranges(model.LimitRanges)
	userLimitRanges = ranges(model.UserLimitRanges)
	scheduleRanges  = submitRanges.with("period_ms",
		model.Range{Min: model.PeriodMin.Milliseconds(), Max: model.PeriodMax.Milliseconds()})
	noIntegerFields = ranges{}
)

// with returns rs and one more field's range.
func (rs ranges) with(field string, r model.Range) ranges {
	out := ranges{field: r}
	for k, v := range rs {
		out[k] = v
	}
	return out
}

// decode reads a JSON object into v, refusing unknown fields, trailing
// data and values of the wrong type with a 400 that names the field and
// the rule, in words rather than the decoder's (a too-large body is a
// 413).
func decode(r *http.Request, v any, rs ranges) error { return decodeFrom(r.Body, v, rs) }

// decodeBytes is decode of one JSON value already read (an item of a
// batch).
func decodeBytes(b []byte, v any, rs ranges) error { return decodeFrom(bytes.NewReader(b), v, rs) }

func decodeFrom(body io.Reader, v any, rs ranges) error {
	raw, err := io.ReadAll(body)
	if err != nil {
		return bodyError(err, rs)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bodyError(err, rs)
	}
	if dec.More() {
		return &model.ValidationError{Field: "body", Problem: "trailing data after the JSON object"}
	}
	return repeatedKey(raw)
}

// repeatedKey refuses a body with a key repeated in one object, at any
// depth (a proxy in front may read the first where the decoder keeps the
// last), naming the key's path.
func repeatedKey(raw []byte) error {
	var dup *jsonkeys.DuplicateError
	if err := jsonkeys.Check(raw); errors.As(err, &dup) {
		return &model.ValidationError{Field: dup.Path, Problem: "appears twice in one object"}
	}
	return nil
}

// bodyError words a decoding error.
func bodyError(err error, rs ranges) error {
	var maxBytes *http.MaxBytesError
	var syntax *json.SyntaxError
	var wrongType *json.UnmarshalTypeError
	switch {
	case errors.As(err, &maxBytes):
		return err
	case errors.Is(err, io.EOF):
		return &model.ValidationError{Field: "body", Problem: "required: a JSON object"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &model.ValidationError{Field: "body", Problem: "the JSON ends before the object does"}
	case errors.As(err, &syntax):
		return &model.ValidationError{Field: "body", Problem: fmt.Sprintf("not valid JSON at byte %d", syntax.Offset)}
	case errors.As(err, &wrongType):
		if wrongType.Field == "" {
			return &model.ValidationError{Field: "body", Problem: "must be a JSON object, got " + jsonKind(wrongType.Value)}
		}
		return &model.ValidationError{Field: wrongType.Field, Problem: wantedType(wrongType, rs)}
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if unquoted, uerr := strconv.Unquote(name); uerr == nil {
			name = unquoted
		}
		return &model.ValidationError{Field: "body", Problem: "unknown field " + model.Quote(name, 64)}
	}
	return &model.ValidationError{Field: "body", Problem: "not a JSON object of this request's fields"}
}

// wantedType says what a field of the wrong type must be.
func wantedType(e *json.UnmarshalTypeError, rs ranges) string {
	got := jsonKind(e.Value)
	switch e.Type.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if r, ok := rs[e.Field]; ok {
			return fmt.Sprintf("must be a whole number from %d to %d, got %s", r.Min, r.Max, got)
		}
		return "must be a whole number, got " + got
	case reflect.Float32, reflect.Float64:
		return "must be a number, got " + got
	case reflect.String:
		return "must be a string, got " + got
	case reflect.Bool:
		return "must be true or false, got " + got
	}
	return "wrong type: got " + got
}

// jsonKind names what the decoder found ("number 1e30", "array", ...).
func jsonKind(value string) string {
	if n, ok := strings.CutPrefix(value, "number "); ok {
		return "the number " + model.TruncateRunes(n, 32)
	}
	switch value {
	case "array", "object", "string", "number":
		return "a JSON " + value
	case "bool":
		return "true or false"
	}
	return "a JSON " + model.TruncateRunes(value, 16)
}

// checkRange refuses v outside field's range in rs.
func checkRange(rs ranges, field string, v int64) error {
	r := rs[field]
	if !r.Contains(v) {
		return &model.ValidationError{Field: field, Problem: fmt.Sprintf("must be from %d to %d, got %d", r.Min, r.Max, v)}
	}
	return nil
}

// durationMs converts a count of milliseconds that the caller has checked
// against a range (a larger count would overflow the multiplication: a
// programming error).
func durationMs(ms int64) time.Duration {
	const msMax = math.MaxInt64 / int64(time.Millisecond)
	if ms > msMax || ms < -msMax {
		panic(fmt.Sprintf("leasehold: %d ms overflows a time.Duration", ms))
	}
	return time.Duration(ms) * time.Millisecond
}

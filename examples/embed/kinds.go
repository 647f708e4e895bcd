package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/worker"
)

// Bounds of an invoice's payload.
const (
	invoiceLinesMax    = 100
	invoiceQuantityMax = 10_000
	invoiceCentsMax    = 100_000_000 // a line's unit price: a million
	invoiceNameMax     = 64          // bytes of a customer's or an item's name
)

// report is the payload of the report kind.
type report struct {
	Month string `json:"month"`
}

// checkReport is the report kind's validator: a month as YYYY-MM. Like
// every validator its refusals name the field and the rule, never the
// value.
func checkReport(payload json.RawMessage) error {
	var p report
	if err := json.Unmarshal(payload, &p); err != nil {
		return fieldError(err, "")
	}
	if _, err := time.Parse("2006-01", p.Month); err != nil {
		return &model.ValidationError{Field: "month", Problem: "required: a month as YYYY-MM"}
	}
	return nil
}

// writeReport is the report kind's handler, the simple form: one step,
// whose result is what it returns. A real program would render the
// month's report here; opID would be the idempotency key of any service
// it called.
func writeReport(ctx context.Context, task model.Task, opID string) (string, error) {
	var p report
	if err := json.Unmarshal([]byte(task.Payload), &p); err != nil {
		return "", fmt.Errorf("%w: report payload: %v", worker.ErrPermanent, err)
	}
	return "report for " + p.Month + " written", nil
}

// invoice is the payload of the invoice kind.
type invoice struct {
	Customer string        `json:"customer"`
	Lines    []invoiceLine `json:"lines"`
}

// invoiceLine is one line of an invoice: quantity items at cents each.
type invoiceLine struct {
	Item     string `json:"item"`
	Quantity int64  `json:"quantity"`
	Cents    int64  `json:"cents"`
}

// checkInvoice is the invoice kind's validator: a customer, and from 1 to
// invoiceLinesMax lines, each naming its item with a quantity and a unit
// price within bounds. A refusal names the path of what is wrong
// (lines[2].quantity).
func checkInvoice(payload json.RawMessage) error {
	var p struct {
		Customer string            `json:"customer"`
		Lines    []json.RawMessage `json:"lines"`
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		return fieldError(err, "")
	}
	if p.Customer == "" || len(p.Customer) > invoiceNameMax {
		return &model.ValidationError{Field: "customer", Problem: fmt.Sprintf("required: a name of at most %d bytes", invoiceNameMax)}
	}
	if len(p.Lines) == 0 || len(p.Lines) > invoiceLinesMax {
		return &model.ValidationError{Field: "lines", Problem: fmt.Sprintf("required: from 1 to %d lines", invoiceLinesMax)}
	}
	for i, raw := range p.Lines {
		at := "lines[" + strconv.Itoa(i) + "]"
		var line invoiceLine
		if err := json.Unmarshal(raw, &line); err != nil {
			return fieldError(err, at)
		}
		switch {
		case line.Item == "" || len(line.Item) > invoiceNameMax:
			return &model.ValidationError{Field: at + ".item", Problem: fmt.Sprintf("required: a name of at most %d bytes", invoiceNameMax)}
		case line.Quantity < 1 || line.Quantity > invoiceQuantityMax:
			return &model.ValidationError{Field: at + ".quantity", Problem: fmt.Sprintf("must be a whole number from 1 to %d", invoiceQuantityMax)}
		case line.Cents < 0 || line.Cents > invoiceCentsMax:
			return &model.ValidationError{Field: at + ".cents", Problem: fmt.Sprintf("must be a whole number from 0 to %d", invoiceCentsMax)}
		}
	}
	return nil
}

// fieldError is a decoding error as a refusal naming where, under at, the
// payload has a value of the wrong type; it never quotes the value.
func fieldError(err error, at string) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		field := typeErr.Field
		if at != "" && field != "" {
			field = at + "." + field
		} else if at != "" {
			field = at
		}
		if field == "" {
			field = "payload"
		}
		return &model.ValidationError{Field: field, Problem: "must be a " + jsonType(typeErr.Type.Kind())}
	}
	if at == "" {
		at = "payload"
	}
	return &model.ValidationError{Field: at, Problem: "must be a JSON object"}
}

// jsonType names, as JSON would, the type of the payload's Go fields.
func jsonType(kind reflect.Kind) string {
	switch kind {
	case reflect.String:
		return "string"
	case reflect.Slice:
		return "list"
	case reflect.Int64:
		return "whole number"
	default:
		return "JSON object"
	}
}

// invoices is the invoice kind's handler, the planned form: two steps of
// cost 1 each. The first totals the lines and saves the total as its
// checkpoint; the second writes the invoice from that checkpoint, and
// what it returns is the task's result. A task claimed again after the
// first step went through starts at the second, with the first's
// checkpoint.
type invoices struct{}

// The invoice's steps, as StepSpec.Data names them.
const (
	stepTotal = "total"
	stepWrite = "write"
)

// Plan returns the invoice's two steps.
func (invoices) Plan(task model.Task) ([]worker.StepSpec, error) {
	return []worker.StepSpec{{Cost: 1, Data: stepTotal}, {Cost: 1, Data: stepWrite}}, nil
}

// Run runs one step of the invoice.
func (invoices) Run(ctx context.Context, task model.Task, index int, step worker.StepSpec) (string, error) {
	var p invoice
	if err := json.Unmarshal([]byte(task.Payload), &p); err != nil {
		return "", fmt.Errorf("%w: invoice payload: %v", worker.ErrPermanent, err)
	}
	switch step.Data {
	case stepTotal:
		var total int64
		for _, line := range p.Lines {
			total += line.Quantity * line.Cents
		}
		return strconv.FormatInt(total, 10), nil
	case stepWrite:
		total, err := strconv.ParseInt(task.Checkpoint, 10, 64)
		if err != nil {
			return "", fmt.Errorf("%w: the total step's checkpoint is not a number", worker.ErrPermanent)
		}
		return fmt.Sprintf("invoice for %s: %d lines, %d.%02d", p.Customer, len(p.Lines), total/100, total%100), nil
	default:
		return "", fmt.Errorf("%w: invoice has no step %v", worker.ErrPermanent, step.Data)
	}
}

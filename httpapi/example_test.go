package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/console"
	"github.com/leasehold/leasehold/httpapi"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/randomid"
)

// serveInvoices is a program's server: the API and the console of its
// queue, with its own tokens and payload rule, mounted on its own mux
// beside its own page, until ctx is done.
func serveInvoices(ctx context.Context, q *queue.Queue, tokens []httpapi.Token, ln net.Listener) error {
	api, err := httpapi.New(httpapi.Options{Queue: q, Tokens: tokens,
		Validators: map[string]model.PayloadValidator{"invoice": checkInvoice}})
	if err != nil {
		return err
	}
	ui, err := console.New(console.Options{API: api})
	if err != nil {
		return err
	}
	defer ui.Close()
	mux := http.NewServeMux()
	api.Mount(mux)                 // /v1/, /openapi.json, /metrics, /healthz
	mux.Handle(console.Prefix, ui) // /ui/
	mux.HandleFunc("GET /{$}", home)
	return api.Serve(ctx, ln, mux) // until ctx is done
}

// checkInvoice is the program's rule for the payloads of its kind
// invoice: an invoice of a positive amount. Its refusals name the field
// and the rule, never the value.
func checkInvoice(payload json.RawMessage) error {
	var invoice struct {
		Amount int64 `json:"amount"`
	}
	if err := json.Unmarshal(payload, &invoice); err != nil {
		return &model.ValidationError{Field: "amount", Problem: "must be a whole number"}
	}
	if invoice.Amount <= 0 {
		return &model.ValidationError{Field: "amount", Problem: "must be more than 0"}
	}
	return nil
}

// home is the program's own page.
func home(w http.ResponseWriter, _ *http.Request) {
	fmt.Fprintln(w, "invoices: the program's own page")
}

// Example serves the API and the console from a program's own mux
// (serveInvoices) on a real listener, and calls it as a client and a
// browser would.
func Example() {
	ctx, stop := context.WithCancel(context.Background())
	dir, err := os.MkdirTemp("", "leasehold-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	q, err := queue.Open(ctx, queue.Options{Path: filepath.Join(dir, "invoices.db"), Clock: clockwork.NewRealClock(), IDs: randomid.Source{}})
	if err != nil {
		panic(err)
	}
	defer q.Close()
	const secret = "billing-secret-0123456789"
	tokens, err := httpapi.ParseTokens("billing submit,approve,operate "+secret+" *", true)
	if err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	served := make(chan error, 1)
	go func() { served <- serveInvoices(ctx, q, tokens, ln) }()
	base := "http://" + ln.Addr().String()

	c, err := client.New(base, secret)
	if err != nil {
		panic(err)
	}
	res, err := c.Submit(ctx, model.SubmitRequest{User: "acme", Key: "invoice-42", Kind: "invoice", Payload: `{"amount": 30}`, CostBudget: 10, StepsMax: 1})
	fmt.Println("invoice-42:", err == nil && !res.Replay)
	_, err = c.Submit(ctx, model.SubmitRequest{User: "acme", Key: "invoice-43", Kind: "invoice", Payload: `{"amount": -5}`, CostBudget: 10, StepsMax: 1})
	fmt.Println("invoice-43:", err)
	for _, path := range []string{"/", "/ui/signin"} {
		resp, err := http.Get(base + path)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(path, resp.StatusCode, len(body) > 0)
	}
	stop()
	fmt.Println("served:", <-served)
	// Output:
	// invoice-42: true
	// invoice-43: leasehold: 400 bad_input (field payload.amount): payload.amount: must be more than 0
	// / 200 true
	// /ui/signin 200 true
	// served: <nil>
}

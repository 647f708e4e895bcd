// Package client is a Go client of leasehold's HTTP API (see
// docs/API.md and the OpenAPI document the server serves at
// /openapi.json).
//
// Every call takes a context and returns typed records; a refusal is an
// *Error carrying the HTTP status, the API's error code and the field it
// names, and matches this package's sentinels under errors.Is:
//
//	c, err := client.New("http://127.0.0.1:8080", os.Getenv("LEASEHOLD_TOKEN"))
//	if err != nil {
//		return err
//	}
//	res, err := c.Submit(ctx, model.SubmitRequest{User: "alice", Key: "invoice-42", Payload: `{"steps":[]}`, CostBudget: 10, StepsMax: 5})
//	if errors.Is(err, client.ErrConflict) {
//		return fmt.Errorf("invoice-42 was submitted with another request: %w", err)
//	}
//	if err != nil {
//		return err
//	}
//	t, err := c.Task(ctx, res.TaskID)
//	if err != nil {
//		return err
//	}
//	t, err = c.WaitTask(ctx, res.TaskID, t.LastEventSeq, 30*time.Second) // at its next event, or after 30 s
//
// # Usage
//
// New takes the server's base URL and a bearer token's secret. Long calls
// (WaitTask, Follow) are bounded by the server (at most 60 s a wait) and by
// the caller's context. Follow reads the audit trail as Server-Sent
// Events and returns, with the sequence number of the last event it
// delivered, when the stream ends; calling it again from that number
// resumes without a gap or a repeat. The package reads no clock: a caller
// that reconnects chooses its own pause.
package client

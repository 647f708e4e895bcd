package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/model"
)

// submitAndFollow is docs/API.md's tour of the client (and the package
// doc's Usage is its first lines): TestAPIGoExampleIsCompiled holds both
// to it.
func submitAndFollow(ctx context.Context) error {
	c, err := client.New("http://127.0.0.1:8080", os.Getenv("LEASEHOLD_TOKEN"))
	if err != nil {
		return err
	}
	res, err := c.Submit(ctx, model.SubmitRequest{User: "alice", Key: "invoice-42", Payload: `{"steps":[]}`, CostBudget: 10, StepsMax: 5})
	if errors.Is(err, client.ErrConflict) {
		return fmt.Errorf("invoice-42 was submitted with another request: %w", err)
	}
	if err != nil {
		return err
	}
	t, err := c.Task(ctx, res.TaskID)
	if err != nil {
		return err
	}
	t, err = c.WaitTask(ctx, res.TaskID, t.LastEventSeq, 30*time.Second) // at its next event, or after 30 s
	if err != nil {
		return err
	}
	fmt.Println(t.ID, t.State)
	var last int64 // the last event seen: a follow resumes after it
	for {
		last, err = c.Follow(ctx, last, func(e client.Event) error {
			fmt.Println(e.Seq, e.Kind)
			return nil
		})
		if !errors.Is(err, client.ErrStreamEnded) {
			return err
		}
		time.Sleep(time.Second) // the server went away: reconnect after a pause
	}
}

// Example submits a task and follows the audit trail of a server on this
// machine.
func Example() {
	if err := submitAndFollow(context.Background()); err != nil {
		log.Fatal(err)
	}
}

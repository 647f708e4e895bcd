package queue

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/model"
)

// WorkerWrites is what a worker writes to the queue: the claim, and every
// write made under it, each fenced by the claim. Store includes it;
// *Queue and model.Reference implement it, worker.Queue is its name in
// the worker's Config, and the fault injector faults.Queue wraps one.
type WorkerWrites interface {
	Claim(ctx context.Context, req model.ClaimRequest) ([]model.Claimed, error)
	Heartbeat(ctx context.Context, c model.Claim, lease time.Duration) (model.HeartbeatResult, error)
	CompleteStep(ctx context.Context, w model.StepWrite) (model.StepResult, error)
	RecordIntent(ctx context.Context, c model.Claim, step int) (model.IntentResult, error)
	RecordReceipt(ctx context.Context, c model.Claim, opID, result string) error
	Pause(ctx context.Context, c model.Claim, step int, gate string) (model.State, error)
	Complete(ctx context.Context, c model.Claim) error
	Fail(ctx context.Context, c model.Claim, f model.Failure) (model.State, error)
	Release(ctx context.Context, c model.Claim) (model.State, error)
	AcknowledgeCancel(ctx context.Context, c model.Claim) error
}

var (
	_ WorkerWrites = (*Queue)(nil)
	_ WorkerWrites = (*model.Reference)(nil)
)

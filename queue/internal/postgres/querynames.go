package postgres

import "github.com/leasehold/leasehold/queue/internal/seam"

// The statements only PostgreSQL's files define that the store runs
// itself (its claim, fused group, lone submit and wake-ups); the
// protocol's are declared in queue/querynames.go.
var (
	qClaimBatch       = seam.Name("claim_batch")
	qCompleteAndClaim = seam.Name("complete_and_claim")
	qSubmitOne        = seam.Name("submit_one")
	qReadyNotify      = seam.Name("ready_notify")
	qReadyListen      = seam.Name("ready_listen")
	qReadySchema      = seam.Name("ready_schema")
)

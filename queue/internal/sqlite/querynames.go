package sqlite

import "github.com/leasehold/leasehold/queue/internal/seam"

// The statements only SQLite's files define that the store runs itself
// (its claim); the protocol's are declared in queue/querynames.go.
var (
	qClaimNext      = seam.Name("claim_next")
	qClaimNextKinds = seam.Name("claim_next_kinds")
	qClaimRoom      = seam.Name("claim_room")
	qClaimTask      = seam.Name("claim_task")
	qClaimTasks     = seam.Name("claim_tasks")
)

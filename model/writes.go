package model

// Write names one of a worker's writes to the queue: the claim, and each
// write made under it (fenced by the claim). The same names appear in a
// stale write's event detail, in the worker's reports, in the fault
// injector's duplicates and in the simulator's traces.
type Write string

// The writes of a worker.
const (
	WriteClaim     Write = "claim"
	WriteHeartbeat Write = "heartbeat"
	WriteStep      Write = "step"
	// WriteIntent records a step's effect intent: the operation ID, before
	// the service is called. The event it appends is EventEffectIntent.
	WriteIntent Write = "effect_intent"
	// WriteReceipt records the service's result for an operation: the
	// event it appends is EventEffectReceipt.
	WriteReceipt   Write = "effect_receipt"
	WritePause     Write = "pause"
	WriteComplete  Write = "complete"
	WriteFail      Write = "fail"
	WriteRelease   Write = "release"
	WriteCancelAck Write = "cancel_ack"
)

// FencedWrites lists the writes made under a claim, in a fixed order.
func FencedWrites() []Write {
	return []Write{WriteHeartbeat, WriteStep, WriteIntent, WriteReceipt, WritePause, WriteComplete, WriteFail, WriteRelease, WriteCancelAck}
}

// ParseWrite returns the fenced write named name.
func ParseWrite(name string) (Write, bool) {
	for _, w := range FencedWrites() {
		if string(w) == name {
			return w, true
		}
	}
	return "", false
}

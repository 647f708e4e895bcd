package chaos

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/leasehold/leasehold/reports"
)

// ResultKind labels every chaos result: live, never fixture.
const ResultKind = "live"

// Result is Dir/result.json: what one chaos run did and what the checker
// found. It is the one record the chaos run and the evidence report share.
type Result struct {
	Kind    string            `json:"kind"` // always ResultKind
	Seed    uint64            `json:"seed"`
	Started string            `json:"started"` // RFC 3339, wall clock
	Machine map[string]string `json:"machine"`
	Pragmas []string          `json:"pragmas"`
	// Settings are the run's configuration as it ran.
	Settings Settings `json:"settings"`
	// Counts are what the run did; Findings what the checker found.
	Counts    Counts    `json:"counts"`
	Findings  Findings  `json:"findings"`
	Durations Durations `json:"durations_ms"`
	Lanes     []Lane    `json:"lanes"`
	// Timeline lists every attack and recovery, in order.
	Timeline []Moment `json:"timeline"`
	// Pass is true when the run reached its check with every count as
	// configured and the checker found no violation.
	Pass bool `json:"pass"`
	// Failure, when the run could not finish its plan, says why.
	Failure string `json:"failure,omitempty"`
}

// Settings is the configuration a run used.
type Settings struct {
	Kills          int      `json:"kills"`
	Stops          int      `json:"stops"`
	Tasks          int      `json:"tasks"`
	Aimed          int      `json:"aimed"` // kills to aim between intent and receipt
	Lanes          []string `json:"lanes"` // the service kinds, one lane each
	WorkersPerLane int      `json:"workers_per_lane"`
	Concurrency    int      `json:"concurrency"`
	LeaseMs        int64    `json:"lease_ms"`
	HeartbeatMs    int64    `json:"heartbeat_ms"`
	AttemptsMax    int      `json:"attempts_max"`
	Synchronous    string   `json:"synchronous"`
	JournalMode    string   `json:"journal_mode"`
}

// Counts is what the run did.
type Counts struct {
	Tasks       int `json:"tasks"` // accepted submits
	Kills       int `json:"kills"` // SIGKILLs, aimed ones included
	AimedBefore int `json:"aimed_before_apply"`
	AimedAfter  int `json:"aimed_after_apply"`
	AimMissed   int `json:"aim_missed"` // aims that found no worker in a call (a random kill or stop was made instead)
	Stops       int `json:"stops"`      // SIGSTOP ... SIGCONT pairs
	StopsPast   int `json:"stops_past_lease"`
	StopsAimed  int `json:"stops_aimed"` // frozen while waiting inside a service call
	Restarts    int `json:"restarts"`
	Cancels     int `json:"cancels"`   // cancellations the queue accepted
	Approvals   int `json:"approvals"` // approvals the queue accepted
	Rejections  int `json:"rejections"`
	// StaleRefused counts the writes the queue refused as stale (late
	// results of stopped or killed claims among them).
	StaleRefused int `json:"stale_refused"`
	// Applied counts the operations the services applied.
	Applied int `json:"applied"`
	// LateCalls counts the service calls made under a fence that a newer
	// claim of the task had already replaced (from the service's call log
	// and the event trail), and how the service answered them.
	LateCalls map[string]int `json:"late_calls"`
	// States counts the tasks by final state.
	States map[string]int `json:"states"`
}

// Findings is the checker's report: every count is a violation but
// Porcupine and Integrity, which are verdicts.
type Findings struct {
	Lost          int `json:"lost"`
	Duplicated    int `json:"duplicated"`
	Unexpected    int `json:"unexpected"`
	StaleAccepted int `json:"stale_accepted"`
	Overspent     int `json:"overspent"`
	// Porcupine is "ok" (every task's history linearizable), "illegal" or
	// "unknown" (the check timed out).
	Porcupine string `json:"porcupine"`
	// Integrity is "ok" when PRAGMA integrity_check said ok for every
	// database and ledger, else the first answer that was not.
	Integrity string `json:"integrity"`
	// Details names the first violations found (bounded).
	Details []string `json:"details,omitempty"`
}

// Clean reports whether the findings hold no violation.
func (f Findings) Clean() bool {
	return f.Lost == 0 && f.Duplicated == 0 && f.Unexpected == 0 && f.StaleAccepted == 0 && f.Overspent == 0 &&
		f.Porcupine == PorcupineOK && f.Integrity == "ok"
}

// Durations are the run's phases, in wall milliseconds.
type Durations struct {
	Total  int64 `json:"total"`
	Attack int64 `json:"attack"`
	Drain  int64 `json:"drain"`
	Check  int64 `json:"check"`
}

// Lane is one service kind's part of the run.
type Lane struct {
	Kind     string         `json:"kind"`
	Workers  []string       `json:"workers"`
	Tasks    int            `json:"tasks"`
	States   map[string]int `json:"states"`
	Applied  int            `json:"applied"`
	Findings Findings       `json:"findings"`
}

// Moment is one thing the run did to its workers, or saw them do.
type Moment struct {
	AtMs   int64  `json:"at_ms"`
	Lane   string `json:"lane"`
	Worker string `json:"worker,omitempty"`
	Kind   string `json:"kind"` // one of the Moment kinds
	Detail string `json:"detail"`
}

// Moment kinds.
const (
	MomentStart   = "start"
	MomentKill    = "kill"
	MomentAimed   = "aimed_kill"
	MomentExit    = "exit"
	MomentStop    = "stop"
	MomentCont    = "cont"
	MomentHold    = "hold" // a lock taken to aim a kill
	MomentRelease = "release"
	MomentMiss    = "aim_missed"
	MomentCancel  = "cancel" // the caller cancelled a task
	MomentDecide  = "decide" // the caller approved or rejected a task
	MomentPhase   = "phase"  // the run moved to its next phase
)

// ReadResult reads a result.json and checks that it is a chaos result.
func ReadResult(path string) (Result, error) {
	var r Result
	b, err := os.ReadFile(path)
	if err != nil {
		return r, fmt.Errorf("read the chaos run's result (run make chaos first): %w", err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("read the chaos run's result %s: %w", path, err)
	}
	if r.Kind != ResultKind {
		return r, fmt.Errorf("read the chaos run's result %s: %w", path, errNotLive)
	}
	return r, nil
}

var errNotLive = errors.New("not a live chaos result")

func writeResult(path string, r Result) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return reports.WriteFile(path, append(b, '\n'))
}

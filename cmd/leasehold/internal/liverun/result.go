package liverun

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/reports"
)

// Kind labels every Result: its figures are live measurements.
const Kind = "live"

// Story names what an outcome checks, so that readers find an outcome by
// its story, not by its wording.
type Story string

// The stories of the live run.
const (
	// StoryExpect: a scenario task ended as the scenario expects (Task
	// names it).
	StoryExpect           Story = "expect"
	StoryReplay           Story = "replay"
	StoryConflict         Story = "conflict"
	StoryCancel           Story = "cancel_running"
	StoryApproval         Story = "restart_while_paused"
	StoryApproveOutdated  Story = "approve_outdated"
	StoryKill             Story = "sigkill"
	StoryStop             Story = "sigstop"
	StoryStorageSubmit    Story = "storage_submit"
	StoryStorageBackoff   Story = "storage_backoff"
	StoryUserLimit        Story = "user_limit"
	StoryDuplicateDeliver Story = "duplicate_completion"
	StoryNoRepeat         Story = "no_repeated_effect"
	StoryOverBudget       Story = "over_budget_effect"
	StoryRan              Story = "ran_to_the_end"
	// StoryTokenBound: a user's token submits for no other user and reads
	// no other user's task.
	StoryTokenBound Story = "token_bound"
)

// Outcome is one expected outcome and what was observed.
type Outcome struct {
	Story    Story  `json:"story"`
	Task     string `json:"task,omitempty"` // the scenario task, for StoryExpect
	Name     string `json:"name"`
	Expected string `json:"expected"`
	Observed string `json:"observed"`
	Pass     bool   `json:"pass"`
	AtMs     int64  `json:"at_ms"`
}

// MomentKind is what the run did at a moment of its timeline.
type MomentKind string

// The kinds of moment.
const (
	// ServerStarted: the run's `leasehold serve` answers at Addr (Worker
	// is "serve").
	ServerStarted   MomentKind = "server_started"
	WorkerStarted   MomentKind = "worker_started"
	WorkerSignalled MomentKind = "worker_signalled"
	WorkerExited    MomentKind = "worker_exited"
	StorageLocked   MomentKind = "storage_locked"
	StorageUnlocked MomentKind = "storage_unlocked"
	TaskSubmitted   MomentKind = "task_submitted"
	// TaskReclaimed: another worker claimed the task again after its
	// claimant was killed or stopped (Worker is the new claimant).
	TaskReclaimed   MomentKind = "task_reclaimed"
	CancelRequested MomentKind = "cancel_requested"
	TaskWaiting     MomentKind = "task_waiting"
	TaskApproved    MomentKind = "task_approved"
	LimitSet        MomentKind = "limit_set"
	AllEnded        MomentKind = "all_ended"
)

// Moment is one thing the run did, with its wall-clock offset.
type Moment struct {
	AtMs   int64      `json:"at_ms"`
	Kind   MomentKind `json:"kind"`
	Worker string     `json:"worker,omitempty"`
	PID    int        `json:"pid,omitempty"`
	Signal string     `json:"signal,omitempty"` // SIGKILL, SIGSTOP, SIGCONT or SIGTERM
	Task   string     `json:"task,omitempty"`   // the scenario task's name
	TaskID string     `json:"task_id,omitempty"`
	// Actor is who cancelled or approved, or the user a limit is for.
	Actor string `json:"actor,omitempty"`
	// Version is the approval version named, the fence of a new claim, or
	// a running limit.
	Version int64 `json:"version,omitempty"`
	// Addr is the address the server listens on.
	Addr string `json:"addr,omitempty"`
}

// String is the moment as the run prints it.
func (m Moment) String() string {
	switch m.Kind {
	case ServerStarted:
		return fmt.Sprintf("started the API server (pid %d) at %s", m.PID, m.Addr)
	case WorkerStarted:
		return fmt.Sprintf("started worker %s (pid %d)", m.Worker, m.PID)
	case WorkerSignalled:
		return fmt.Sprintf("sent %s to worker %s (pid %d)", m.Signal, m.Worker, m.PID)
	case WorkerExited:
		return fmt.Sprintf("worker %s exited", m.Worker)
	case StorageLocked:
		return "storage unavailable: another connection holds an exclusive lock"
	case StorageUnlocked:
		return "storage available again"
	case TaskSubmitted:
		return fmt.Sprintf("submitted %s as %s", m.Task, m.TaskID)
	case TaskReclaimed:
		return fmt.Sprintf("%s is running again under claim %d by %s", m.Task, m.Version, m.Worker)
	case CancelRequested:
		return fmt.Sprintf("cancelled the running task %s as %s", m.Task, m.Actor)
	case TaskWaiting:
		return fmt.Sprintf("%s waits at its gate with version %d", m.Task, m.Version)
	case TaskApproved:
		return fmt.Sprintf("approved %s as %s naming version %d", m.Task, m.Actor, m.Version)
	case LimitSet:
		return fmt.Sprintf("set user %s's running limit to %d", m.Actor, m.Version)
	case AllEnded:
		return "every task has ended"
	}
	return string(m.Kind)
}

// Sample is one metrics reading during the run.
type Sample struct {
	AtMs    int64         `json:"at_ms"`
	Metrics model.Metrics `json:"metrics"`
}

// Task is a task's final state as the run records it: no payload, no
// checkpoint.
type Task struct {
	Name        string `json:"name"`
	ID          string `json:"id"`
	User        string `json:"user"`
	State       string `json:"state"`
	Reason      string `json:"reason"`
	Version     int64  `json:"version"`
	CostUsed    int64  `json:"cost_used"`
	CostBudget  int64  `json:"cost_budget"`
	StepsUsed   int    `json:"steps_used"`
	StepsMax    int    `json:"steps_max"`
	Owner       string `json:"owner"`
	CancelledBy string `json:"cancelled_by"`
	ApprovedBy  string `json:"approved_by"`
	LastError   string `json:"last_error"`
}

// TaskOf records t under the scenario name given.
func TaskOf(name string, t model.Task) Task {
	return Task{Name: name, ID: t.ID, User: t.User, State: string(t.State), Reason: string(t.Reason), Version: t.Version,
		CostUsed: t.CostUsed, CostBudget: t.CostBudget, StepsUsed: t.StepsUsed, StepsMax: t.StepsMax, Owner: t.Owner,
		CancelledBy: t.CancelledBy, ApprovedBy: t.ApprovedBy, LastError: t.LastError}
}

// Result is a live run's record, written as result.json.
type Result struct {
	Kind       string            `json:"kind"` // always Kind
	Scenario   string            `json:"scenario"`
	Started    time.Time         `json:"started"`
	DurationMs int64             `json:"duration_ms"`
	Machine    map[string]string `json:"machine"`
	Commit     string            `json:"commit"`
	Pragmas    []string          `json:"pragmas"`
	Settings   map[string]string `json:"settings"`
	// NotLive lists the scenario's acts the live run does not play, each
	// with why.
	NotLive  []string          `json:"not_live"`
	Pass     bool              `json:"pass"`
	Outcomes []Outcome         `json:"outcomes"`
	Tasks    []Task            `json:"tasks"`
	Events   []model.Event     `json:"events"`
	Metrics  model.Metrics     `json:"metrics"`
	Samples  []Sample          `json:"samples"`
	Timeline []Moment          `json:"timeline"`
	IDs      map[string]string `json:"task_ids"`
	Applied  map[string]int    `json:"effects_applied"`
}

// Find returns the first outcome of story (and, when task is not empty,
// of that scenario task).
func (r Result) Find(story Story, task string) (Outcome, bool) {
	for _, o := range r.Outcomes {
		if o.Story == story && (task == "" || o.Task == task) {
			return o, true
		}
	}
	return Outcome{}, false
}

// Read reads a live run's result.json.
func Read(path string) (Result, error) {
	var r Result
	b, err := os.ReadFile(path)
	if err != nil {
		return r, fmt.Errorf("read the live run's result (run make demo first): %w", err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("read %s: %w", path, err)
	}
	if r.Kind != Kind {
		return r, fmt.Errorf("%s is labelled %q, not %s", path, r.Kind, Kind)
	}
	return r, nil
}

// Write writes r to path as indented JSON.
func (r Result) Write(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode the live result: %w", err)
	}
	if err := reports.WriteFile(path, b); err != nil {
		return fmt.Errorf("the live result: %w", err)
	}
	return nil
}

package liverun

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/worker"
)

// The live fault stories: what only real processes, signals and a real
// file lock show. Their tasks are the run's own, beside the scenario's.

func repeatSteps(n int, step string) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = step
	}
	return `{"steps":[` + strings.Join(parts, ",") + `]}`
}

// storyTasks are the fault stories' tasks.
var storyTasks = map[string]model.SubmitRequest{
	"crash": {User: "ivy", Key: "crash-1", CostBudget: 20, StepsMax: 8,
		Payload: `{"steps":[{"cost":1,"duration_ms":700},{"cost":2,"effect":"ship"},{"cost":1,"duration_ms":700},{"cost":1,"duration_ms":700},{"cost":1,"duration_ms":700}]}`},
	"late":   {User: "jo", Key: "late-1", CostBudget: 20, StepsMax: 10, Payload: repeatSteps(8, `{"cost":1,"duration_ms":600}`)},
	"steady": {User: "lee", Key: "steady-1", CostBudget: 10, StepsMax: 8, Payload: repeatSteps(6, `{"cost":1,"duration_ms":400}`)},
	"outage": {User: "kim", Key: "outage-1", CostBudget: 5, StepsMax: 5, Payload: `{"steps":[{"cost":1}]}`},
	"twice":  {User: "gus", Key: "twice-1", CostBudget: 5, StepsMax: 2, Payload: `{"steps":[{"cost":1,"duration_ms":100}]}`},
}

// waitRunningStep waits until the task runs with at least one step done.
func (r *run) waitRunningStep(name string) (client.Task, error) {
	return r.watch(name, name+" to run a step", waitSlice, func(t client.Task) (bool, error) {
		return t.State == model.Running && t.StepsUsed >= 1, nil
	})
}

// storyKill kills the claimant of a task mid-task with SIGKILL: its lease
// must expire and the other worker take the task over.
func (r *run) storyKill() error {
	if err := r.submit("crash", storyTasks["crash"]); err != nil {
		return err
	}
	t, err := r.waitRunningStep("crash")
	if err != nil {
		return err
	}
	victim := t.Owner
	if err := r.signal(victim, syscall.SIGKILL); err != nil {
		return err
	}
	if err := r.waitReclaimed("crash", t, victim); err != nil {
		return err
	}
	done, err := r.waitState("crash", ended...)
	if err != nil {
		return err
	}
	events, err := r.events("crash")
	if err != nil {
		return err
	}
	expired, takenBy := false, ""
	for _, ev := range events {
		if ev.Kind == model.EventLeaseExpired && ev.Fence == t.Version {
			expired = true
		}
		if ev.Kind == model.EventClaimed && ev.Fence > t.Version && takenBy == "" {
			takenBy = ev.Actor
		}
	}
	r.outcome(StoryKill, "", "worker killed with SIGKILL mid-task", "its lease expires, the other worker takes the task over and completes it",
		fmt.Sprintf("killed %s holding fence %d; lease_expired=%t; taken over by %s; %s", victim, t.Version, expired, dash(takenBy), done.State),
		expired && takenBy != "" && takenBy != victim && done.State == model.Completed)
	return r.restart(victim)
}

// waitReclaimed waits until a worker other than was claims the task under
// a newer claim than before's, and records the recovery.
func (r *run) waitReclaimed(name string, before client.Task, was string) error {
	cur, err := r.watch(name, name+" to be claimed again", waitSlice, func(cur client.Task) (bool, error) {
		return cur.Version > before.Version && cur.Owner != was, nil
	})
	if err != nil {
		return err
	}
	r.moment(Moment{Kind: TaskReclaimed, Task: name, TaskID: cur.ID, Worker: cur.Owner, Version: cur.Version})
	return nil
}

// logRecord is the part of a worker's JSON log record the stories read.
type logRecord struct {
	TaskID  string `json:"task_id"`
	Fence   int64  `json:"fence"`
	Outcome string `json:"outcome"`
	// StorageError marks a claim or a write that failed in storage (and
	// is retried after a backoff).
	StorageError bool `json:"storage_error"`
	// Left is why a slot left its claim (worker.LeftLeaseExpired, ...).
	Left string `json:"left"`
}

// workerLog decodes a worker's log records; lines that are not JSON
// records (there should be none) are skipped.
func (r *run) workerLog(name string) []logRecord {
	f, err := os.Open(filepath.Join(r.cfg.Dir, name+".log"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []logRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		var rec logRecord
		if json.Unmarshal(sc.Bytes(), &rec) == nil {
			out = append(out, rec)
		}
	}
	return out
}

// storyStop freezes a task's claimant with SIGSTOP past its lease and
// continues it once another claim runs the task.
func (r *run) storyStop() error {
	if err := r.submit("late", storyTasks["late"]); err != nil {
		return err
	}
	t, err := r.waitRunningStep("late")
	if err != nil {
		return err
	}
	stopped := t.Owner
	if err := r.signal(stopped, syscall.SIGSTOP); err != nil {
		return err
	}
	if err := r.waitReclaimed("late", t, stopped); err != nil {
		return err
	}
	if err := r.signal(stopped, syscall.SIGCONT); err != nil {
		return err
	}
	// Continued, the worker finds its lease run out by its own clock and
	// drops the claim without writing; a write it had already begun is
	// refused by version instead.
	var late string
	_, err = r.watch("late", "the stopped worker to drop its claim or have its late write refused", logSlice, func(client.Task) (bool, error) {
		for _, rec := range r.workerLog(stopped) {
			if rec.Left == worker.LeftLeaseExpired && rec.TaskID == r.ids["late"] && rec.Fence == t.Version {
				late = "dropped without a write: lease expired locally"
				return true, nil
			}
		}
		events, err := r.events("late")
		for _, ev := range events {
			if ev.Kind == model.EventStaleWrite && ev.Fence == t.Version && ev.Actor == stopped {
				late = "refused: " + ev.Detail
				return true, nil
			}
		}
		return false, err
	})
	if err != nil {
		return err
	}
	done, err := r.waitState("late", ended...)
	if err != nil {
		return err
	}
	r.outcome(StoryStop, "", "worker stopped with SIGSTOP past its lease, then continued",
		"it drops the claim without a write (its lease ran out by its own clock), or its late write is rejected by version; the task completes under the newer claim",
		fmt.Sprintf("%s held fence %d; %s; %s at version %d", stopped, t.Version, late, done.State, done.Version),
		done.State == model.Completed && done.Version > t.Version)
	return nil
}

// storyStorage holds an exclusive lock on the database for two and a half
// seconds (another connection, as a backup tool or a stuck migration
// would), and submits a task meanwhile.
func (r *run) storyStorage() error {
	// A task in the middle of its steps, so that the workers meet the lock.
	if err := r.submit("steady", storyTasks["steady"]); err != nil {
		return err
	}
	if _, err := r.waitState("steady", model.Running); err != nil {
		return err
	}
	release, err := r.lockStorage(context.Background())
	if err != nil {
		return err
	}
	r.moment(Moment{Kind: StorageLocked})
	outage := storyTasks["outage"]
	caller := r.c.users[outage.User]
	call, cancel := r.callCtx()
	first, firstErr := caller.Submit(call, outage)
	cancel()
	time.Sleep(2500 * time.Millisecond) // the lock is held for the story: the workers are meant to meet it
	if err := release(); err != nil {
		return fmt.Errorf("release the exclusive lock: %w", err)
	}
	r.moment(Moment{Kind: StorageUnlocked})
	// What did the submit made during the outage do? Ask again: an exact
	// replay says whether the first one was stored.
	call, cancel = r.callCtx()
	again, err := caller.Submit(call, outage)
	cancel()
	if err != nil {
		return fmt.Errorf("resubmit outage: %w", err)
	}
	r.ids["outage"], r.reqs["outage"] = again.TaskID, outage
	// A success must have been stored; a refusal must say the storage is
	// unavailable (503, to be retried: the idempotency key makes the retry
	// safe whether or not the first was stored), never anything else.
	truthful := (firstErr == nil && again.Replay && first.TaskID == again.TaskID) ||
		(errors.Is(firstErr, client.ErrUnavailable) && refusedAs(firstErr, "unavailable"))
	r.outcome(StoryStorageSubmit, "", "submit while storage is unavailable", "503 unavailable (retry is safe), or a durable success; never a false success",
		fmt.Sprintf("first submit: task %s, error %v; resubmit replay=%t", dash(first.TaskID), firstErr, again.Replay), truthful)
	backedOff := 0
	for i := 1; i <= r.sc.Workers; i++ {
		for _, rec := range r.workerLog(fmt.Sprintf("w%d", i)) {
			if rec.StorageError {
				backedOff++
			}
		}
	}
	r.outcome(StoryStorageBackoff, "", "workers back off while storage is unavailable", "storage errors logged with backoff, then work resumes",
		fmt.Sprintf("%d storage errors with backoff in the worker logs", backedOff), backedOff > 0)
	return nil
}

// storyCompleteTwice makes sure w2, which delivers every completion twice,
// completes a task: with every other task ended, w1 is stopped (it holds
// nothing), a one-step task is submitted and w2 alone can claim it. The
// second delivery of a completion must be refused as a stale write.
func (r *run) storyCompleteTwice() error {
	if err := r.signal("w1", syscall.SIGSTOP); err != nil {
		return err
	}
	if err := r.submit("twice", storyTasks["twice"]); err != nil {
		return err
	}
	_, werr := r.waitState("twice", ended...)
	if err := r.signal("w1", syscall.SIGCONT); err != nil {
		return err
	}
	if werr != nil {
		return werr
	}
	return r.checkDuplicateCompletion()
}

// checkDuplicateCompletion looks in the audit trail (read from the
// database, as the run's checks are) for a completion by w2 followed by a
// stale write of w2 under the same fence: the second delivery, refused.
func (r *run) checkDuplicateCompletion() error {
	events, err := r.q.Events(r.ctx, "")
	if err != nil {
		return fmt.Errorf("read the audit trail: %w", err)
	}
	completed := map[string]int64{} // task → the fence w2 completed it under
	seen := ""
	for _, ev := range events {
		switch {
		case ev.Kind == model.EventCompleted && ev.Actor == "w2":
			completed[ev.TaskID] = ev.Fence
		case ev.Kind == model.EventStaleWrite && ev.Actor == "w2":
			if f, ok := completed[ev.TaskID]; ok && f == ev.Fence {
				seen = ev.TaskID
			}
		}
	}
	observed, pass := "no second delivery seen (w2 completed nothing)", false
	if seen != "" {
		t, err := r.q.Task(r.ctx, seen)
		if err != nil {
			return fmt.Errorf("read %s: %w", seen, err)
		}
		observed = fmt.Sprintf("second completion of %s refused as stale; the task stays %s", seen, t.State)
		pass = t.State == model.Completed
	}
	r.outcome(StoryDuplicateDeliver, "", "a completion delivered twice", "the second changes nothing (refused, recorded as a stale write)", observed, pass)
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

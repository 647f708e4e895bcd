package chaos

import (
	"fmt"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold/model"
)

// Porcupine verdicts.
const (
	PorcupineOK      = "ok"
	PorcupineIllegal = "illegal"
	PorcupineUnknown = "unknown"
)

// porcupineTimeout bounds the linearizability check of one run.
const porcupineTimeout = 30 * time.Second

// claimState is the per-task register the history is checked against:
// the task's state, its fence (the version of its latest claim) and the
// owner of that claim.
type claimState struct {
	State model.State
	Fence int64
	Owner string
}

// op is one operation on a task's register, taken from one event of the
// trail. Worker marks writes a worker made under its claim.
type op struct {
	TaskID string
	Seq    int64
	Kind   model.EventKind
	Actor  string
	Fence  int64
	From   model.State
	To     model.State
	Worker bool
}

// accepted is an operation's output: whether the queue accepted it. Every
// event records an accepted operation except stale_write, which records a
// refused worker write.
type accepted bool

// step applies o to s: whether the register allows it, and the state
// after. It is the sequential specification:
//
//   - a task starts when it is submitted, queued at fence 0;
//   - a claim moves queued to running with fence+1 and names its owner;
//   - an accepted worker write carries the current fence of its owner,
//     while the task is running, and moves it to the write's state;
//   - a refused write changes nothing, and may always be refused (the
//     lease may have run out at the queue's clock);
//   - any other change (the reaper, a caller, an operator) starts from the
//     state the task is in, under its current fence.
func step(s claimState, o op, ok accepted) (bool, claimState) {
	switch {
	case !bool(ok):
		return true, s
	case o.Kind == model.EventSubmitted:
		return s.State == "" && o.To == model.Queued, claimState{State: model.Queued}
	case s.State == "":
		return false, s
	case o.Kind == model.EventClaimed:
		legal := s.State == model.Queued && o.From == model.Queued && o.To == model.Running && o.Fence == s.Fence+1
		return legal, claimState{State: model.Running, Fence: o.Fence, Owner: o.Actor}
	case o.Worker:
		legal := s.State == model.Running && o.From == model.Running && o.Fence == s.Fence && o.Actor == s.Owner
		return legal, claimState{State: o.To, Fence: s.Fence, Owner: s.Owner}
	default:
		legal := o.From == s.State && o.Fence == s.Fence
		next := s
		next.State = o.To
		return legal, next
	}
}

// registerModel is the porcupine model of every task's register,
// partitioned by task.
var registerModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byTask := map[string][]porcupine.Operation{}
		var ids []string
		for _, h := range history {
			id := h.Input.(op).TaskID
			if _, ok := byTask[id]; !ok {
				ids = append(ids, id)
			}
			byTask[id] = append(byTask[id], h)
		}
		sort.Strings(ids)
		out := make([][]porcupine.Operation, 0, len(ids))
		for _, id := range ids {
			out = append(out, byTask[id])
		}
		return out
	},
	Init: func() any { return claimState{} },
	Step: func(state, input, output any) (bool, any) {
		return step(state.(claimState), input.(op), output.(accepted))
	},
	DescribeOperation: func(input, output any) string {
		o := input.(op)
		return fmt.Sprintf("%s by %s fence %d %s->%s accepted=%t", o.Kind, o.Actor, o.Fence, o.From, o.To, bool(output.(accepted)))
	},
	DescribeState: func(state any) string {
		s := state.(claimState)
		return fmt.Sprintf("%s fence %d owner %s", s.State, s.Fence, s.Owner)
	},
}

// Entry is one event of the trail as the history needs it, with the wall
// time its transaction held the database's write lock.
type Entry struct {
	Event model.Event
	// Worker marks an event a worker wrote under its claim (its actor is
	// a worker of the lane, and it is neither a claim nor a refusal).
	Worker bool
}

// History turns a trail into porcupine operations, one per event that
// concerns a task's claim register. An event's interval is the wall-clock
// millisecond in which its transaction ran: the queue reads its clock
// after taking the write lock, so intervals follow commit order, and
// events of one millisecond are concurrent for the checker. Client IDs
// follow the actors, for porcupine's visualisation.
func History(entries []Entry) []porcupine.Operation {
	clients := map[string]int{}
	var out []porcupine.Operation
	for _, e := range entries {
		ev := e.Event
		if ev.TaskID == "" || !registerEvent(ev.Kind) {
			continue
		}
		id, ok := clients[ev.Actor]
		if !ok {
			id = len(clients)
			clients[ev.Actor] = id
		}
		at := ev.At.UnixMilli()
		out = append(out, porcupine.Operation{ClientId: id, Call: at, Return: at,
			Input: op{TaskID: ev.TaskID, Seq: ev.Seq, Kind: ev.Kind, Actor: ev.Actor, Fence: ev.Fence,
				From: ev.From, To: ev.To, Worker: e.Worker},
			Output: accepted(ev.Kind != model.EventStaleWrite)})
	}
	return out
}

// registerEvent reports whether an event kind changes (or tries to change)
// a task's claim register. Events that record something beside it (an
// operator settling an effect, a cancellation request on a running task,
// which changes neither state nor fence, still count: they must name the
// task's current state and fence).
func registerEvent(k model.EventKind) bool {
	switch k {
	case model.EventLimitsSet, model.EventScheduleAdded, model.EventScheduleRemoved, model.EventRestored, model.EventMigrated,
		model.EventPruned, model.EventRetentionSet:
		return false
	}
	return true
}

// CheckLinearizable runs porcupine over the history and returns its verdict.
func CheckLinearizable(history []porcupine.Operation) string {
	switch porcupine.CheckOperationsTimeout(registerModel, history, porcupineTimeout) {
	case porcupine.Ok:
		return PorcupineOK
	case porcupine.Illegal:
		return PorcupineIllegal
	}
	return PorcupineUnknown
}

// replay runs each task's trail through the register in commit (sequence)
// order and returns the events the register refuses: the strict,
// sequential form of the porcupine check, which names what broke.
func replay(entries []Entry) []Entry {
	sorted := append([]Entry(nil), entries...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Event.Seq < sorted[j].Event.Seq })
	states := map[string]claimState{}
	var bad []Entry
	for _, e := range sorted {
		ev := e.Event
		if ev.TaskID == "" || !registerEvent(ev.Kind) {
			continue
		}
		o := op{TaskID: ev.TaskID, Seq: ev.Seq, Kind: ev.Kind, Actor: ev.Actor, Fence: ev.Fence, From: ev.From, To: ev.To, Worker: e.Worker}
		legal, next := step(states[ev.TaskID], o, accepted(ev.Kind != model.EventStaleWrite))
		if !legal {
			bad = append(bad, e)
			continue // judge the rest against the state before the bad write
		}
		states[ev.TaskID] = next
	}
	return bad
}

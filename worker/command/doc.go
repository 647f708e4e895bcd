// Package command is a worker.Handler that runs a program: the kinds
// file's "worker" member made live, what `leasehold worker --kinds FILE`
// runs for each kind it names.
//
// # One run
//
// A task of the kind is one step, and the step is one run of the
// command, in its own process group:
//
//   - stdin: the task's payload (a JSON object);
//   - environment: the worker's own, without its LEASEHOLD_ variables,
//     plus LEASEHOLD_TASK_ID, LEASEHOLD_ATTEMPT, LEASEHOLD_FENCE,
//     LEASEHOLD_OPERATION_ID (the step's operation ID: the same on every
//     attempt, the idempotency key to give any service the command
//     calls), LEASEHOLD_KIND and LEASEHOLD_STEP;
//   - stdout: its last non-empty line is the step's checkpoint and the
//     effect's recorded result (the task's result), cut to
//     model.ResultMax bytes; the rest is read and dropped;
//   - stderr: logged line by line at the worker's logger (each line cut
//     to StderrLineMax bytes, at most StderrLinesMax lines a run), and
//     never written to the task or its events: a command should not print
//     secrets there;
//   - exit status: 0 is success, 75 (EX_TEMPFAIL) a transient failure
//     (retried after a backoff while attempts remain), any other status a
//     permanent failure; a death by a signal the worker did not send is a
//     transient failure.
//
// The worker heartbeats the claim while the command runs, however long
// it runs. When the run's context is cancelled (the task's cancellation
// requested, the claim lost, the step's timeout passed, or the worker's
// shutdown grace ended; context.Cause says which) the whole process group
// gets SIGTERM and, Grace later, SIGKILL. When the command itself exits,
// whatever it left running in its group is killed: nothing of a run
// outlives it.
//
// # Side effects and the ledger
//
// The run is the step's effect (worker.StepSpec.Ledger): the worker
// records the intent before it starts the command and the receipt once
// the command exits 0. A run that ends any other way leaves the intent
// without a receipt, and the next attempt settles it before anything
// runs, as the kind's service kind says:
//
//   - dedup (worker.Dedup): the command is run again under the same
//     operation ID; the service it calls applies each ID at most once, so
//     the effect is applied exactly once if that service keeps its word.
//   - queryable (worker.Queryable): the reconcile command is asked
//     (LEASEHOLD_OPERATION_ID and LEASEHOLD_FENCE in its environment;
//     exit 0 applied, its last stdout line the result; 1 not applied;
//     anything else: it cannot say yet, asked again after a backoff).
//     Applied: the receipt is recorded and the command is not run again.
//     Not applied: the task goes to needs_review, since the earlier run
//     may still be going (its worker stalled, or killed with its command
//     left running) and apply it late. At most once.
//   - fenced (worker.Fenced): as queryable, and the reconcile command
//     registers LEASEHOLD_FENCE with the service, which refuses the
//     operation under a lower fence (the command passes its own). Not
//     applied: the command runs again under the new fence, and the
//     earlier run, should it come late, is refused. Exactly once.
//   - none (worker.Plain): the task goes to needs_review for an operator
//     to settle. At most once.
//
// A command that applies nothing outside itself is safe to run again:
// give it the dedup kind.
package command

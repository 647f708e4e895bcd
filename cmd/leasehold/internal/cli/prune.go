package cli

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

func init() {
	register("prune", "retention: prune --older-than D [--keep-keys D] [--dry-run]; prune policy [--older-than D|off] [--keep-keys D]", runPrune)
}

// pruneFlags maps the fields of the queue's retention errors to the flags
// that set them, so that a refusal names the flag.
var pruneFlags = map[string]string{"older_than": "--older-than", "keep_keys": "--keep-keys", "batch": "--batch", "actor": "--actor"}

// pruneFlagError words a retention validation error with the flag's name.
func pruneFlagError(err error) error {
	var v *model.ValidationError
	if errors.As(err, &v) {
		if flag, ok := pruneFlags[v.Field]; ok {
			return badUsage("%s: %s", flag, v.Problem)
		}
	}
	return err
}

// ageFlag parses a retention duration flag (30d, 36h); off is zero where
// offOK.
func ageFlag(name, value string, offOK bool) (time.Duration, error) {
	if offOK && value == "off" {
		return 0, nil
	}
	d, err := queue.ParseAge(value)
	if err != nil {
		return 0, badUsage("--%s: %v", name, err)
	}
	return d, nil
}

// runPrune removes terminal tasks settled longer ago than --older-than, or
// (prune policy) shows or sets what every worker's housekeeping prunes.
func runPrune(e *env, args []string) int {
	if len(args) > 0 && args[0] == "policy" {
		return prunePolicy(e, args[1:])
	}
	fs := flag.NewFlagSet("prune", flag.ContinueOnError)
	c := commonFlags(fs, true)
	olderThan := fs.String("older-than", "", "remove terminal tasks settled at least this long ago: days (30d) or a duration (36h); required")
	keepKeys := fs.String("keep-keys", queue.FormatAge(queue.DefaultKeepKeys),
		"keep the pruned tasks' idempotency keys this long, so that a replayed submit is still recognised")
	batch := fs.Int("batch", queue.PruneBatchMax, fmt.Sprintf("tasks removed per transaction (1 to %d)", queue.PruneBatchMax))
	dryRun := fs.Bool("dry-run", false, "print what would go and change nothing")
	if err := parse(fs, args); err != nil {
		return fail(e, "prune", err)
	}
	req, err := pruneRequest(*olderThan, *keepKeys, *batch, *dryRun, *c.actor)
	if err != nil {
		return fail(e, "prune", err)
	}
	return withQueue(e, "prune", c, func(q *queue.Queue) error {
		res, err := q.Prune(e.ctx, req)
		if err != nil {
			if res.Transactions > 0 {
				printPruned(e, res, req.KeepKeys)
			}
			return pruneFlagError(err)
		}
		if *c.json {
			return printJSON(e.stdout, pruneRecordOf(res))
		}
		printPruned(e, res, req.KeepKeys)
		return nil
	})
}

// pruneRequest checks the prune flags, naming the one that is wrong,
// before anything is opened.
func pruneRequest(olderThan, keepKeys string, batch int, dryRun bool, actor string) (queue.PruneRequest, error) {
	if olderThan == "" {
		return queue.PruneRequest{}, badUsage("--older-than is required (such as --older-than 30d)")
	}
	age, err := ageFlag("older-than", olderThan, false)
	if err != nil {
		return queue.PruneRequest{}, err
	}
	window, err := ageFlag("keep-keys", keepKeys, false)
	if err != nil {
		return queue.PruneRequest{}, err
	}
	if window == 0 {
		return queue.PruneRequest{}, badUsage("--keep-keys: must be positive, got 0 (a replayed submit of a pruned task must still be recognised)")
	}
	if batch < 1 || batch > queue.PruneBatchMax {
		return queue.PruneRequest{}, badUsage("--batch: must be between 1 and %d, got %d", queue.PruneBatchMax, batch)
	}
	req := queue.PruneRequest{OlderThan: age, KeepKeys: window, Batch: batch, DryRun: dryRun, Actor: actor}
	if err := req.Check(); err != nil {
		return queue.PruneRequest{}, pruneFlagError(err)
	}
	return req, nil
}

// pruneRecord is a prune's result as --json prints it.
type pruneRecord struct {
	DryRun       bool             `json:"dry_run"`
	Cutoff       string           `json:"cutoff"`
	Tasks        int64            `json:"tasks"`
	ByState      map[string]int64 `json:"by_state"`
	Events       int64            `json:"events"`
	Effects      int64            `json:"effects"`
	Tombstones   int64            `json:"tombstones"`
	Expired      int64            `json:"expired_tombstones"`
	Kept         int64            `json:"kept"`
	KeptIDs      []string         `json:"kept_ids,omitempty"` // a dry run's first kept tasks
	Transactions int              `json:"transactions"`
}

func pruneRecordOf(r queue.PruneResult) pruneRecord {
	by := map[string]int64{}
	for _, s := range []model.State{model.Completed, model.Failed, model.Cancelled} {
		by[string(s)] = r.Tasks[s]
	}
	return pruneRecord{DryRun: r.DryRun, Cutoff: r.Cutoff.UTC().Format(time.RFC3339Nano), Tasks: r.TaskCount(), ByState: by,
		Events: r.Events, Effects: r.Effects, Tombstones: r.Tombstones, Expired: r.Expired, Kept: r.Kept, KeptIDs: r.KeptIDs,
		Transactions: r.Transactions}
}

// printPruned prints what a prune removed, or (a dry run) would remove.
func printPruned(e *env, r queue.PruneResult, keepKeys time.Duration) {
	verb, wrote, removed := "pruned", "wrote", "removed"
	if r.DryRun {
		verb, wrote, removed = "would prune", "would write", "would remove"
	}
	fmt.Fprintf(e.stdout, "%s %d terminal tasks settled at or before %s (completed %d, failed %d, cancelled %d), %d events, %d effects\n",
		verb, r.TaskCount(), r.Cutoff.UTC().Format(time.RFC3339), r.Tasks[model.Completed], r.Tasks[model.Failed],
		r.Tasks[model.Cancelled], r.Events, r.Effects)
	fmt.Fprintf(e.stdout, "%s %d idempotency tombstones (kept %s); %s %d whose window has passed\n",
		wrote, r.Tombstones, queue.FormatAge(keepKeys), removed, r.Expired)
	if r.Kept > 0 {
		fmt.Fprintf(e.stdout, "kept %d terminal tasks past the age: each has an effect without its receipt, never pruned (leasehold events TASK shows its intent)", r.Kept)
		if len(r.KeptIDs) > 0 {
			fmt.Fprintf(e.stdout, ": %s", strings.Join(r.KeptIDs, " "))
			if more := r.Kept - int64(len(r.KeptIDs)); more > 0 {
				fmt.Fprintf(e.stdout, " and %d more", more)
			}
		}
		fmt.Fprintln(e.stdout)
	}
	if !r.DryRun {
		fmt.Fprintf(e.stdout, "%d transactions, each recorded in the audit trail\n", r.Transactions)
	}
}

// policyRecord is the retention policy as --json prints it.
type policyRecord struct {
	OlderThan string `json:"older_than"` // "off" when housekeeping prunes nothing
	KeepKeys  string `json:"keep_keys"`
}

// prunePolicy shows the stored retention policy, or sets it when a flag is
// given.
func prunePolicy(e *env, args []string) int {
	fs := flag.NewFlagSet("prune policy", flag.ContinueOnError)
	c := commonFlags(fs, true)
	olderThan := fs.String("older-than", "", "housekeeping prunes terminal tasks settled this long ago (30d, 36h), or off")
	keepKeys := fs.String("keep-keys", "", "keep the pruned tasks' idempotency keys this long")
	if err := parse(fs, args); err != nil {
		return fail(e, "prune policy", err)
	}
	set := *olderThan != "" || *keepKeys != ""
	var age, window time.Duration
	var err error
	if *olderThan != "" {
		age, err = ageFlag("older-than", *olderThan, true)
	}
	if err == nil && *keepKeys != "" {
		window, err = ageFlag("keep-keys", *keepKeys, false)
	}
	if err == nil && set {
		err = model.CheckName("actor", *c.actor)
	}
	if err != nil {
		return fail(e, "prune policy", pruneFlagError(err))
	}
	return withQueue(e, "prune policy", c, func(q *queue.Queue) error {
		p, err := q.Retention(e.ctx)
		if err != nil {
			return err
		}
		if set {
			if *olderThan != "" {
				p.OlderThan = age
			}
			if *keepKeys != "" {
				p.KeepKeys = window
			}
			if err := q.SetRetention(e.ctx, p, *c.actor); err != nil {
				return pruneFlagError(err)
			}
		}
		rec := policyRecord{OlderThan: "off", KeepKeys: queue.FormatAge(p.KeepKeys)}
		if p.OlderThan > 0 {
			rec.OlderThan = queue.FormatAge(p.OlderThan)
		}
		if *c.json {
			return printJSON(e.stdout, rec)
		}
		what := "housekeeping prunes nothing (off)"
		if p.OlderThan > 0 {
			what = "housekeeping prunes terminal tasks settled more than " + rec.OlderThan + " ago"
		}
		prefix := ""
		if set {
			prefix = "set: "
		}
		fmt.Fprintf(e.stdout, "%s%s; tombstones kept %s\n", prefix, what, rec.KeepKeys)
		return nil
	})
}

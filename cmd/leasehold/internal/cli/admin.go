package cli

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"runtime/debug"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/view"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/wire"
)

func init() {
	register("limits", "show or change limits (only those named change): limits [--user U --running-max N --depth-max N] [--depth-max N ...]", runLimits)
	register("schedule", "periodic schedules: schedule add|list|run|remove", runSchedule)
	register("version", "print the module version, commit and build settings", runVersion)
	register("reap", "run the reaper once: requeue expired leases, fail passed deadlines", runReap)
}

func runReap(e *env, args []string) int {
	fs := flag.NewFlagSet("reap", flag.ContinueOnError)
	c := commonFlags(fs, false)
	if err := parse(fs, args); err != nil {
		return fail(e, "reap", err)
	}
	return withQueue(e, "reap", c, func(q *queue.Queue) error {
		total := model.ReapResult{}
		for {
			res, err := q.Reap(e.ctx)
			if err != nil {
				return err
			}
			total.Expired += res.Expired
			total.Deadlines += res.Deadlines
			if !res.More {
				break
			}
		}
		if *c.json {
			return printJSON(e.stdout, map[string]int{"expired": total.Expired, "deadlines": total.Deadlines})
		}
		fmt.Fprintf(e.stdout, "expired leases settled: %d; tasks failed for their deadline: %d\n", total.Expired, total.Deadlines)
		return nil
	})
}

// printMetrics prints m, its counts by kind naming kinds and every other
// kind as other.
func printMetrics(e *env, m model.Metrics, kinds []string) {
	fmt.Fprintln(e.stdout, "depth by state:")
	for _, s := range model.States() {
		fmt.Fprintf(e.stdout, "  %-21s %d\n", s, m.Depth[s])
	}
	fmt.Fprintf(e.stdout, "oldest due queued task: %s\n", view.Duration(m.OldestQueuedAge))
	fmt.Fprintf(e.stdout, "submitted %d, completed %d, failed %d, cancelled %d, reviews %d, pruned %d\n",
		m.Submitted, m.Completions, m.Failures, m.Cancellations, m.Reviews, m.Pruned)
	fmt.Fprintf(e.stdout, "retries %d, lease expiries %d, stale writes refused %d, budget exhaustions %d\n",
		m.Retries, m.LeaseExpiries, m.StaleWrites, m.BudgetExhausted)
	printCountsByKind(e.stdout, wire.MetricsOf(m, kinds).ByKind)
	for _, h := range []struct {
		name string
		h    model.Histogram
	}{{"queue wait (eligible -> claimed)", m.QueueWait}, {"run time (claimed -> claim ended)", m.RunTime}} {
		mean := int64(0)
		if h.h.Count > 0 {
			mean = h.h.SumMs / h.h.Count
		}
		fmt.Fprintf(e.stdout, "%s: %d observations, mean %s; ", h.name, h.h.Count, view.DurationMs(mean))
		for i, n := range h.h.Counts {
			if n == 0 {
				continue
			}
			if i < len(model.HistogramBounds) {
				fmt.Fprintf(e.stdout, "<=%s:%d ", view.DurationMs(model.HistogramBounds[i]), n)
			} else {
				fmt.Fprintf(e.stdout, ">%s:%d ", view.DurationMs(model.HistogramBounds[len(model.HistogramBounds)-1]), n)
			}
		}
		fmt.Fprintln(e.stdout)
	}
}

// limitsFlags is what limits's flags ask for; given names the flags set,
// since a limit flag not given leaves its limit as it is (no sentinel
// value stands for "not given").
type limitsFlags struct {
	user                                      *string
	runningMax, depthMax, userDepthMax        *int
	attemptsMax, grantStepsMax, claimBatchMax *int
	grantCostMax                              *int64
	given                                     map[string]bool
}

// limitFlags are limits's flags that change a limit; a user's limits take
// only the first two.
var limitFlags = []string{"running-max", "depth-max", "user-depth-max", "attempts-max", "grant-cost-max", "grant-steps-max", "claim-batch-max"}

func newLimitsFlags(fs *flag.FlagSet) *limitsFlags {
	d := model.DefaultLimits
	return &limitsFlags{
		user: fs.String("user", "", "the user whose limits --running-max and --depth-max set; alone it only shows"),
		runningMax: fs.Int("running-max", 0, fmt.Sprintf("running tasks: with --user that user's (-1 inherits the default, 0 unlimited, up to %d); "+
			"else the default per user (0 unlimited; a new database has %d)", model.UserLimitRanges["running_max"].Max, d.UserRunningMax)),
		depthMax: fs.Int("depth-max", 0, fmt.Sprintf("active tasks: with --user that user's (-1 inherits the default, 0 unlimited, up to %d); "+
			"else the overall cap (0 unlimited; a new database has %d)", model.UserLimitRanges["depth_max"].Max, d.DepthMax)),
		userDepthMax: fs.Int("user-depth-max", 0, fmt.Sprintf("default active tasks per user, 0 unlimited (a new database has %d)", d.UserDepthMax)),
		attemptsMax: fs.Int("attempts-max", 0, fmt.Sprintf("charged attempts before dead letter, %d to %d (a new database has %d)",
			model.LimitRanges["attempts_max"].Min, model.LimitRanges["attempts_max"].Max, d.AttemptsMax)),
		grantCostMax:  fs.Int64("grant-cost-max", 0, fmt.Sprintf("largest cost grant on requeue (a new database has %d)", d.GrantCostMax)),
		grantStepsMax: fs.Int("grant-steps-max", 0, fmt.Sprintf("largest step grant on requeue (a new database has %d)", d.GrantStepsMax)),
		claimBatchMax: fs.Int("claim-batch-max", 0, fmt.Sprintf("largest claim batch, %d to %d (a new database has %d)",
			model.LimitRanges["claim_batch_max"].Min, model.LimitRanges["claim_batch_max"].Max, d.ClaimBatchMax)),
	}
}

// parsed records which flags fs was given, and checks them: --user takes
// only a user's two limits, and names a valid user.
func (lf *limitsFlags) parsed(fs *flag.FlagSet) error {
	lf.given = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { lf.given[f.Name] = true })
	if *lf.user == "" {
		return nil
	}
	for _, name := range limitFlags[2:] {
		if lf.given[name] {
			return badUsage("--user takes only --running-max and --depth-max, not --%s", name)
		}
	}
	return model.CheckName("user", *lf.user)
}

// changing reports whether any limit flag was given (else limits shows).
func (lf *limitsFlags) changing() bool {
	for _, name := range limitFlags {
		if lf.given[name] {
			return true
		}
	}
	return false
}

// userChange is the change to the user's limits the flags given make.
func (lf *limitsFlags) userChange() model.UserLimitChange {
	var c model.UserLimitChange
	if lf.given["running-max"] {
		c.RunningMax = lf.runningMax
	}
	if lf.given["depth-max"] {
		c.DepthMax = lf.depthMax
	}
	return c
}

// change is the change to the queue-wide limits the flags given make
// (without --user, --running-max and --depth-max are the per-user default
// and the overall cap).
func (lf *limitsFlags) change() model.LimitsChange {
	var c model.LimitsChange
	for _, a := range []struct {
		flag string
		v    *int
		dst  **int
	}{{"running-max", lf.runningMax, &c.UserRunningMax}, {"depth-max", lf.depthMax, &c.DepthMax},
		{"user-depth-max", lf.userDepthMax, &c.UserDepthMax}, {"attempts-max", lf.attemptsMax, &c.AttemptsMax},
		{"grant-steps-max", lf.grantStepsMax, &c.GrantStepsMax}, {"claim-batch-max", lf.claimBatchMax, &c.ClaimBatchMax}} {
		if lf.given[a.flag] {
			*a.dst = a.v
		}
	}
	if lf.given["grant-cost-max"] {
		c.GrantCostMax = lf.grantCostMax
	}
	return c
}

func runLimits(e *env, args []string) int {
	fs := flag.NewFlagSet("limits", flag.ContinueOnError)
	c := commonFlags(fs, true)
	lf := newLimitsFlags(fs)
	if err := parse(fs, args); err != nil {
		return fail(e, "limits", err)
	}
	if err := lf.parsed(fs); err != nil {
		return fail(e, "limits", err)
	}
	changing := lf.changing()
	if changing {
		if err := model.CheckName("actor", *c.actor); err != nil {
			return fail(e, "limits", err)
		}
	}
	with := withReader // showing only reads
	if changing {
		with = withQueue
	}
	return with(e, "limits", c, func(q *queue.Queue) error {
		limits, users, err := q.Limits(e.ctx)
		if err != nil {
			return err
		}
		switch { // a change names some limits: the others stay as they are
		case *lf.user != "" && changing: // a bare --user only shows
			err = q.SetUserLimit(e.ctx, lf.userChange().Apply(model.UserLimitOf(users, *lf.user)), *c.actor)
		case changing:
			err = q.SetLimits(e.ctx, lf.change().Apply(limits), *c.actor)
		}
		if err != nil {
			return err
		}
		if limits, users, err = q.Limits(e.ctx); err != nil {
			return err
		}
		if *c.json {
			return printJSON(e.stdout, wire.LimitsViewOf(limits, users))
		}
		printLimits(e.stdout, limits, users)
		return nil
	})
}

// printLimits prints the limits and the per-user overrides.
func printLimits(w io.Writer, limits model.Limits, users []model.UserLimit) {
	fmt.Fprintf(w, "depth_max=%d user_depth_max=%d user_running_max=%d attempts_max=%d grant_cost_max=%d grant_steps_max=%d claim_batch_max=%d\n",
		limits.DepthMax, limits.UserDepthMax, limits.UserRunningMax, limits.AttemptsMax, limits.GrantCostMax,
		limits.GrantStepsMax, limits.ClaimBatchMax)
	for _, u := range users {
		fmt.Fprintf(w, "user %s running_max=%d depth_max=%d (-1 inherits, 0 unlimited)\n", u.User, u.RunningMax, u.DepthMax)
	}
}

func runSchedule(e *env, args []string) int {
	sub, args, err := dispatch("schedule", args)
	if err != nil {
		return fail(e, "schedule", err)
	}
	fs := flag.NewFlagSet("schedule "+sub, flag.ContinueOnError)
	c := commonFlags(fs, true)
	run := map[string]func(*env, *flag.FlagSet, common, []string) int{
		"add": scheduleAdd, "list": scheduleList, "run": scheduleRun, "remove": scheduleRemove}[sub]
	if run == nil {
		return fail(e, "schedule", badUsage("unknown schedule command %q (want add, list, run or remove)", sub))
	}
	return run(e, fs, c, args)
}

// scheduleAdd adds a schedule: schedule add --user U --payload P ... --period D.
func scheduleAdd(e *env, fs *flag.FlagSet, c common, args []string) int {
	kindsFlag(fs, &c)
	user := fs.String("user", "", "user the runs belong to; required")
	kind := fs.String("kind", "", "each run's kind (default synthetic)")
	payload := fs.String("payload", "", "each run's payload: JSON, or @FILE; required")
	costBudget := fs.Int64("cost-budget", 0, "each run's cost budget; required unless the kinds file gives the kind one")
	stepsMax := fs.Int("steps-max", 0, "each run's step limit; required unless the kinds file gives the kind one")
	priority := fs.Int("priority", 0, "each run's priority")
	origin := fs.String("origin", "", "when run 0 is due: RFC 3339 or +DURATION; required")
	period := fs.Duration("period", 0, fmt.Sprintf("time between runs, %s to %s (run k is due at origin + k*period); required", model.PeriodMin, model.PeriodMax))
	if err := parse(fs, args); err != nil {
		return fail(e, "schedule", err)
	}
	body, err := readPayload(*payload)
	if err == nil {
		err = model.CheckName("actor", *c.actor)
	}
	var at time.Time
	if err == nil {
		at, err = parseTime("origin", *origin)
	}
	spec := model.ScheduleSpec{User: *user, Kind: *kind, Payload: body, CostBudget: *costBudget, StepsMax: *stepsMax,
		Priority: *priority, Origin: at, Period: *period}
	var defaults map[string]model.RequestDefaults
	if err == nil {
		defaults, err = c.defaults()
	}
	if err == nil {
		_, err = spec.WithDefaults(defaults).Validate()
	}
	if err != nil {
		return fail(e, "schedule", err)
	}
	return withQueue(e, "schedule", c, func(q *queue.Queue) error {
		s, err := q.AddSchedule(e.ctx, spec, *c.actor)
		if err != nil {
			return err
		}
		fmt.Fprintln(e.stdout, s.ID)
		return nil
	})
}

// scheduleList lists the schedules.
func scheduleList(e *env, fs *flag.FlagSet, c common, args []string) int {
	if err := parse(fs, args); err != nil {
		return fail(e, "schedule", err)
	}
	return withReader(e, "schedule", c, func(q *queue.Queue) error {
		schedules, err := q.Schedules(e.ctx)
		if err != nil {
			return err
		}
		if *c.json {
			return printJSON(e.stdout, wire.All(schedules, wire.ScheduleOf))
		}
		for _, s := range schedules {
			fmt.Fprintf(e.stdout, "%s user=%s origin=%s period=%s last_run=%d next_due=%s kind=%s\n", s.ID, s.User,
				wire.TimeOf(s.Origin), s.Period, s.LastRun, wire.TimeOf(s.Origin.Add(time.Duration(s.LastRun+1)*s.Period)), s.Kind)
		}
		return nil
	})
}

// scheduleRun enqueues the runs that are due.
func scheduleRun(e *env, fs *flag.FlagSet, c common, args []string) int {
	if err := parse(fs, args); err != nil {
		return fail(e, "schedule", err)
	}
	return withQueue(e, "schedule", c, func(q *queue.Queue) error {
		res, err := q.EnqueueDue(e.ctx)
		if err != nil {
			return err
		}
		if *c.json {
			return printJSON(e.stdout, res)
		}
		fmt.Fprintf(e.stdout, "enqueued %d due runs (%d missed runs collapsed, %d refused by admission)\n",
			res.Enqueued, res.Collapsed, res.Refused)
		return nil
	})
}

// scheduleRemove removes the schedule named by the one argument.
func scheduleRemove(e *env, fs *flag.FlagSet, c common, args []string) int {
	if err := parseWithArgs(fs, args, 1); err != nil {
		return fail(e, "schedule", err)
	}
	id := fs.Arg(0)
	err := checkScheduleID(id)
	if err == nil {
		err = model.CheckName("actor", *c.actor)
	}
	if err != nil {
		return fail(e, "schedule", err)
	}
	return withQueue(e, "schedule", c, func(q *queue.Queue) error {
		if err := q.RemoveSchedule(e.ctx, id, *c.actor); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "schedule %s removed\n", id)
		return nil
	})
}

// Build information stamped with -ldflags "-X PKG.commit=... -X PKG.built=...",
// PKG being this package's import path.
var (
	commit = ""
	built  = ""
)

// versionInfo is what version prints.
type versionInfo struct {
	Module   string            `json:"module"`
	Version  string            `json:"version"`
	Commit   string            `json:"commit"`
	Built    string            `json:"built"`
	Go       string            `json:"go"`
	Schema   int               `json:"schema_version"`
	Settings map[string]string `json:"settings"`
}

func buildVersion() versionInfo {
	v := versionInfo{Commit: commit, Built: built, Schema: queue.SchemaVersion(), Settings: map[string]string{}}
	if info, ok := debug.ReadBuildInfo(); ok {
		v.Module, v.Version, v.Go = info.Main.Path, info.Main.Version, info.GoVersion
		for _, s := range info.Settings {
			v.Settings[s.Key] = s.Value
			if s.Key == "vcs.revision" && v.Commit == "" {
				v.Commit = s.Value
			}
		}
	}
	return v
}

func runVersion(e *env, args []string) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print as JSON")
	if err := parse(fs, args); err != nil {
		return fail(e, "version", err)
	}
	v := buildVersion()
	if *asJSON {
		printJSON(e.stdout, v)
		return exitOK
	}
	fmt.Fprintf(e.stdout, "leasehold %s (module %s)\ncommit %s\nbuilt %s with %s\nschema version %d\n",
		dash(v.Version), v.Module, dash(v.Commit), dash(v.Built), v.Go, v.Schema)
	for _, k := range []string{"vcs.time", "vcs.modified", "-tags", "CGO_ENABLED", "GOARCH", "GOOS"} {
		if val, ok := v.Settings[k]; ok {
			fmt.Fprintf(e.stdout, "  %s=%s\n", k, val)
		}
	}
	return exitOK
}

// printCountsByKind prints the outcome counters by kind as a table, the
// kinds sorted and other last.
func printCountsByKind(w io.Writer, byKind map[string]wire.Counts) {
	fmt.Fprintln(w, "by kind (every kind not named counted as other):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  kind\tsubmitted\tcompleted\tfailed\tcancelled\treviews\tpruned\tretries\tlease expiries\tstale writes\tbudget exhaustions")
	kinds := slices.Sorted(maps.Keys(byKind))
	kinds = append(slices.DeleteFunc(kinds, func(k string) bool { return k == wire.KindOther }), wire.KindOther)
	for _, kind := range kinds {
		c := byKind[kind]
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", kind, c.Submitted, c.Completions, c.Failures,
			c.Cancellations, c.Reviews, c.Pruned, c.Retries, c.LeaseExpiries, c.StaleWrites, c.BudgetExhausted)
	}
	tw.Flush()
}

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold/queue"
)

// system is one queue under test.
type system interface {
	name() string
	// seed writes a database at path holding n queued jobs of steps steps.
	seed(ctx context.Context, path string, n, steps int) error
	// work burns down the n jobs of the database at path with workers,
	// timing from the workers' start to the last job's completion.
	work(ctx context.Context, path, sync string, workers, n, steps int) (sample, error)
	// intake inserts n no-op jobs into a new database at path, in bulk or
	// one at a time, timing the inserts only.
	intake(ctx context.Context, path, sync string, n int, bulk bool) (sample, error)
	// latency sends k jobs one by one through an idle queue, each submitted
	// only after the last completed, and returns submit-to-completed times.
	latency(ctx context.Context, path, sync string, k int) ([]time.Duration, error)
	// postgres says the system runs on PostgreSQL: its path is then a URL
	// naming the run's schema, and it runs only the PostgreSQL cells.
	postgres() bool
}

// cell is one workload under one synchronous setting.
type cell struct {
	kind    string // work, intake, latency
	sync    string
	workers int  // work
	steps   int  // work
	bulk    bool // intake
	procs   int  // PostgreSQL: processes, each of workers workers (work) or one caller (intake)
}

func (c cell) String() string {
	switch c.kind {
	case "work":
		s := fmt.Sprintf("work %s %d workers", c.sync, c.workers)
		if c.sync == pgSync {
			s = fmt.Sprintf("work %s %d workers", "PostgreSQL", c.workers)
		}
		if c.steps > 0 {
			s += fmt.Sprintf(", %d steps", c.steps)
		}
		return s + c.procsSuffix()
	case "intake":
		sync := c.sync
		if sync == pgSync {
			sync = "PostgreSQL"
		}
		return fmt.Sprintf("intake %s %s", sync, map[bool]string{true: "bulk", false: "one at a time"}[c.bulk]) + c.procsSuffix()
	}
	return fmt.Sprintf("latency %s idle", c.sync)
}

func (c cell) procsSuffix() string {
	switch {
	case c.procs == 1:
		return " ×1 process"
	case c.procs > 1:
		return fmt.Sprintf(" ×%d processes", c.procs)
	}
	return ""
}

type config struct {
	rounds, jobs, oneJobs, latencyJobs int
	goqiteConsumers                    []int
	// procs are the process counts of the PostgreSQL cells.
	procs           []int
	only, system    string
	dir, cpuprofile string
	// postgres is the server of the PostgreSQL cells ("" or "off": none).
	postgres string
	// pgAnalyze analyses each PostgreSQL run's schema after its seed.
	pgAnalyze bool
	// pgUnlimited adds leasehold-pg without its per-user running limit
	// to the PostgreSQL work cells.
	pgUnlimited bool
	// pgOwner holds the bench's PostgreSQL schema prefix (set by run).
	pgOwner *pgOwner
}

func main() {
	var cfg config
	var consumers, procs, childSpec string
	flag.IntVar(&cfg.rounds, "rounds", 3, "interleaved rounds; figures are medians")
	flag.IntVar(&cfg.jobs, "jobs", 1500, "jobs per work run and per bulk intake")
	flag.IntVar(&cfg.oneJobs, "one-jobs", 500, "jobs per one-at-a-time intake run")
	flag.IntVar(&cfg.latencyJobs, "latency-jobs", 60, "jobs per idle-latency run (at 20 a grouped/ungrouped ratio of the same build moved 0.79-1.11 between runs; at 60, 0.95-1.05 when the latency cells ran alone and 0.95-1.15 inside full runs)")
	flag.StringVar(&consumers, "goqite-consumers", "1,2,4", "goqite consumer counts tried; its best is reported")
	flag.StringVar(&cfg.only, "only", "", "run only cells whose name matches this regular expression")
	flag.StringVar(&cfg.system, "system", "", "run only systems whose name matches this regular expression")
	flag.StringVar(&cfg.cpuprofile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.StringVar(&cfg.dir, "dir", "", "directory for the databases (default: a new temporary one)")
	flag.StringVar(&cfg.postgres, "postgres", envOr("LEASEHOLD_BENCH_POSTGRES", defaultPostgres),
		"PostgreSQL server for the PostgreSQL cells, a database each run makes a schema in (off: none)")
	flag.BoolVar(&cfg.pgAnalyze, "pg-analyze", false,
		"ANALYZE each PostgreSQL run's freshly seeded schema before timing it (default: measure it unanalysed, as a fresh bulk load is)")
	flag.BoolVar(&cfg.pgUnlimited, "pg-unlimited", false,
		"also run leasehold-pg without its per-user running limit (leasehold-pg-unlimited) in the PostgreSQL work cells, reported beside the limited headline")
	flag.StringVar(&procs, "procs", "1,2,4", "process counts of the PostgreSQL cells (each process 10 workers, or one submitting caller)")
	flag.StringVar(&childSpec, "child", "", "run as one process of a PostgreSQL cell (the bench starts these itself)")
	flag.Parse()
	if childSpec != "" {
		if err := childMain(childSpec); err != nil {
			fmt.Fprintln(os.Stderr, "peers: child:", err)
			os.Exit(1)
		}
		return
	}
	for name, list := range map[string]struct {
		s   string
		out *[]int
	}{"goqite-consumers": {consumers, &cfg.goqiteConsumers}, "procs": {procs, &cfg.procs}} {
		for _, c := range strings.Split(list.s, ",") {
			var n int
			if _, err := fmt.Sscan(c, &n); err != nil || n < 1 {
				fmt.Fprintf(os.Stderr, "peers: -%s: bad count %q\n", name, c)
				os.Exit(2)
			}
			*list.out = append(*list.out, n)
		}
	}
	for name, re := range map[string]string{"only": cfg.only, "system": cfg.system} {
		if _, err := regexp.Compile(re); err != nil {
			fmt.Fprintf(os.Stderr, "peers: -%s: %v\n", name, err)
			os.Exit(2)
		}
	}
	if cfg.rounds < 1 || cfg.jobs < 1 || cfg.oneJobs < 1 || cfg.latencyJobs < 1 {
		fmt.Fprintln(os.Stderr, "peers: -rounds, -jobs, -one-jobs and -latency-jobs must be positive")
		os.Exit(2)
	}
	if err := run(context.Background(), cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	if cfg.dir == "" {
		dir, err := os.MkdirTemp("", "leasehold-peers-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cfg.dir = dir
	}
	if cfg.cpuprofile != "" {
		f, err := os.Create(cfg.cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	printVersions(out)
	fmt.Fprintf(out, "%s; at start %s\n", hostLine(), loadLine())
	if cfg.postgres != "" && cfg.postgres != "off" {
		if err := probePostgres(ctx, cfg.postgres); err != nil {
			fmt.Fprintf(out, "PostgreSQL: skipped: no server answers at %s (%s)\n", queue.RedactURL(cfg.postgres), queue.RedactURL(err.Error()))
			cfg.postgres = ""
		} else {
			owner, err := ownSchemas(ctx, cfg.postgres)
			if err != nil {
				return err
			}
			defer owner.Close()
			cfg.pgOwner = owner
			fmt.Fprintf(out, "PostgreSQL at %s: a schema per run, pools of %d connections, %s\n", queue.RedactURL(cfg.postgres), pgConns,
				map[bool]string{true: "each analysed after its seed (-pg-analyze)", false: "timed unanalysed, as a fresh bulk load is"}[cfg.pgAnalyze])
		}
	} else {
		cfg.postgres = ""
	}
	fmt.Fprintf(out, "jobs %d per work run and bulk intake, %d per one-at-a-time intake, %d per latency run; %d rounds\n\n",
		cfg.jobs, cfg.oneJobs, cfg.latencyJobs, cfg.rounds)

	only := regexp.MustCompile(cfg.system) // checked in main
	systems := slices.DeleteFunc(allSystems(cfg), func(s system) bool { return !only.MatchString(s.name()) })
	if len(systems) == 0 {
		return fmt.Errorf("no system's name matches %q", cfg.system)
	}
	b := &bench{cfg: cfg, out: out, templates: map[string]string{}, results: map[string]map[string][]sample{},
		latencies: map[string]map[string][]time.Duration{}}
	cells := plan(cfg)
	for round := range cfg.rounds {
		fmt.Fprintf(out, "round %d\n", round+1)
		for _, c := range cells {
			// Rotate the order of the systems each round, so none always
			// runs first (or right after another's fsyncs).
			order := slices.Clone(systems)
			k := round % len(order)
			order = append(order[k:], order[:k]...)
			paired := false
			for _, s := range order {
				if pair, ok := latencyPartner(c, s, order); ok {
					// The two leasehold variants' idle latencies are
					// taken job by job in turn, so both see the same
					// disk (the writeback of the databases just removed
					// lands on whichever runs next).
					if paired {
						continue
					}
					paired = true
					if err := b.latencyPair(ctx, c, s.(leasehold), pair); err != nil {
						return fmt.Errorf("%s, %s and %s: %w", c, s.name(), pair.name(), err)
					}
					continue
				}
				if err := b.one(ctx, c, s); err != nil {
					return fmt.Errorf("%s, %s: %w", c, s.name(), err)
				}
			}
		}
	}
	b.report(cells, systems)
	fmt.Fprintf(out, "\n%s; at the end %s\n", hostLine(), loadLine())
	return nil
}

// plan lists the cells of a run.
func plan(cfg config) []cell {
	var cells []cell
	for _, sync := range []string{"FULL", "NORMAL"} {
		cells = append(cells,
			cell{kind: "work", sync: sync, workers: 10},
			cell{kind: "work", sync: sync, workers: 2},
			cell{kind: "work", sync: sync, workers: 10, steps: 3},
			cell{kind: "intake", sync: sync, bulk: true},
			cell{kind: "intake", sync: sync, bulk: false},
			cell{kind: "latency", sync: sync})
	}
	if cfg.postgres != "" {
		for _, n := range cfg.procs {
			cells = append(cells,
				cell{kind: "work", sync: pgSync, workers: 10, procs: n},
				cell{kind: "intake", sync: pgSync, bulk: true, procs: n},
				cell{kind: "intake", sync: pgSync, bulk: false, procs: n})
		}
	}
	if cfg.only == "" {
		return cells
	}
	only := regexp.MustCompile(cfg.only) // checked in main
	return slices.DeleteFunc(cells, func(c cell) bool { return !only.MatchString(c.String()) })
}

// bench holds a run's state: the seeded template databases and every
// sample, by cell and system.
type bench struct {
	cfg       config
	out       io.Writer
	templates map[string]string
	results   map[string]map[string][]sample
	latencies map[string]map[string][]time.Duration
	runs      int
}

// one runs cell c on system s once and records it.
func (b *bench) one(ctx context.Context, c cell, s system) error {
	if s.postgres() != (c.sync == pgSync) {
		return nil
	}
	if l, ok := s.(leasehold); ok && l.unlimited && c.kind != "work" {
		return nil
	}
	if s.postgres() {
		return b.procsRun(ctx, c, s)
	}
	b.runs++
	path := filepath.Join(b.cfg.dir, fmt.Sprintf("run%d.db", b.runs))
	defer removeDB(path)
	key := c.String()
	if g, ok := s.(goq); ok && g.consumers != b.cfg.goqiteConsumers[0] {
		// Consumer counts matter only to work, and there never more
		// consumers than the cell's workers.
		if c.kind != "work" || g.consumers > c.workers {
			return nil
		}
	}
	switch c.kind {
	case "work":
		tmpl, err := b.template(ctx, s, c.steps)
		if err != nil {
			return err
		}
		if err := copyFile(tmpl, path); err != nil {
			return err
		}
		runtime.GC()
		smp, err := s.work(ctx, path, c.sync, c.workers, b.cfg.jobs, c.steps)
		if err != nil {
			return err
		}
		b.record(key, s.name(), smp)
	case "intake":
		n := b.cfg.jobs
		if !c.bulk {
			n = b.cfg.oneJobs
		}
		runtime.GC()
		smp, err := s.intake(ctx, path, c.sync, n, c.bulk)
		if err != nil {
			return err
		}
		b.record(key, s.name(), smp)
	case "latency":
		ds, err := s.latency(ctx, path, c.sync, b.cfg.latencyJobs)
		if err != nil {
			return err
		}
		if b.latencies[key] == nil {
			b.latencies[key] = map[string][]time.Duration{}
		}
		b.latencies[key][s.name()] = append(b.latencies[key][s.name()], ds...)
		fmt.Fprintf(b.out, "  %-34s %-22s median %v of %d\n", key, s.name(), medianDuration(ds), len(ds))
	}
	return nil
}

// latencyPartner is the other leasehold variant of a latency cell on
// SQLite, when both run.
func latencyPartner(c cell, s system, order []system) (leasehold, bool) {
	l, ok := s.(leasehold)
	if c.kind != "latency" || !ok || l.pg {
		return leasehold{}, false
	}
	for _, o := range order {
		if p, ok := o.(leasehold); ok && !p.pg && p.label != l.label {
			return p, true
		}
	}
	return leasehold{}, false
}

// latencyPair runs a latency cell on two leasehold variants at once, each
// on its own database, alternating which submits first.
func (b *bench) latencyPair(ctx context.Context, c cell, x, y leasehold) error {
	var paths [2]string
	for i := range paths {
		b.runs++
		paths[i] = filepath.Join(b.cfg.dir, fmt.Sprintf("run%d.db", b.runs))
		defer removeDB(paths[i])
	}
	got, err := pairedLatency(ctx, [2]leasehold{x, y}, paths, c.sync, b.cfg.latencyJobs)
	if err != nil {
		return err
	}
	key := c.String()
	if b.latencies[key] == nil {
		b.latencies[key] = map[string][]time.Duration{}
	}
	for i, l := range []leasehold{x, y} {
		b.latencies[key][l.name()] = append(b.latencies[key][l.name()], got[i]...)
		fmt.Fprintf(b.out, "  %-34s %-22s median %v of %d (taken in turn with %s)\n", key, l.name(), medianDuration(got[i]), len(got[i]),
			[]leasehold{y, x}[i].name())
	}
	return nil
}

func (b *bench) record(key, name string, smp sample) {
	if b.results[key] == nil {
		b.results[key] = map[string][]sample{}
	}
	b.results[key][name] = append(b.results[key][name], smp)
	retried := ""
	if smp.retried > 0 {
		retried = fmt.Sprintf("  %d writes retried after storage errors", smp.retried)
	}
	if smp.groups > 0 {
		retried += fmt.Sprintf("  %.1f writes per commit", float64(smp.groupOps)/float64(smp.groups))
		if smp.pages > 0 {
			retried += fmt.Sprintf(" (%.1f WAL pages each, %.2f per job)", float64(smp.pages)/float64(smp.groups), float64(smp.pages)/float64(smp.jobs))
		}
	}
	if smp.fused > 0 {
		retried += fmt.Sprintf(", %.0f%% of them one statement", 100*float64(smp.fused)/float64(smp.groups))
	}
	if smp.claimWrites > 0 {
		retried += fmt.Sprintf(", %.1f tasks per claim", float64(smp.claimed)/float64(smp.claimWrites))
	}
	if smp.sizes != "" {
		retried += "; group sizes " + smp.sizes
	}
	if strings.Contains(key, "PostgreSQL") && smp.server > 0 {
		retried = fmt.Sprintf("  %.0f µs server CPU/job (its backends; %.0f the whole server)", smp.serverPerJob(), smp.wholePerJob()) + retried
	}
	fmt.Fprintf(b.out, "  %-34s %-22s %8.0f jobs/s  %6.0f µs CPU/job%s\n", key, name, smp.rate(), smp.cpuPerJob(), retried)
}

// template returns a database seeded by s with the run's jobs, building it
// on first use; every work run starts from a copy.
func (b *bench) template(ctx context.Context, s system, steps int) (string, error) {
	key := fmt.Sprintf("%s-%d", s.name(), steps)
	if p, ok := b.templates[key]; ok {
		return p, nil
	}
	p := filepath.Join(b.cfg.dir, fmt.Sprintf("template%d.db", len(b.templates)))
	if err := s.seed(ctx, p, b.cfg.jobs, steps); err != nil {
		return "", fmt.Errorf("seed: %w", err)
	}
	b.templates[key] = p
	return p, nil
}

func medianDuration(ds []time.Duration) time.Duration {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = float64(d)
	}
	return time.Duration(median(xs))
}

// printVersions prints the versions of the systems and of the SQLite
// driver, from the build.
func printVersions(out io.Writer) {
	fmt.Fprintf(out, "go %s, %s/%s, GOMAXPROCS %d\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0))
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return
	}
	want := []string{"github.com/riverqueue/river", "github.com/riverqueue/river/riverdriver/riversqlite",
		"github.com/riverqueue/river/riverdriver/riverpgxv5", "github.com/jackc/pgx/v5",
		"maragu.dev/goqite", "modernc.org/sqlite", "github.com/leasehold/leasehold"}
	for _, dep := range info.Deps {
		if slices.Contains(want, dep.Path) {
			v := dep.Version
			if dep.Replace != nil {
				v += " => " + dep.Replace.Path
			}
			fmt.Fprintf(out, "%s %s\n", dep.Path, v)
		}
	}
	fmt.Fprintf(out, "SQLite %s; every database a file in WAL, busy_timeout 5000, temp_store MEMORY, BEGIN IMMEDIATE\n", sqliteVersion())
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o600)
}

func removeDB(path string) {
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(path + suffix)
	}
}

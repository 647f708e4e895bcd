package cli

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/liverun"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/randomid"
)

func init() {
	register("demo", "the live portfolio run: real worker processes, signals and the wall clock", runDemo)
}

// runDemo checks --dir, empties it and hands the run to liverun; it
// writes the run's result.json and prints its outcome table.
func runDemo(e *env, args []string) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	dirFlag := fs.String("dir", filepath.Join("out", "demo"), "working directory inside LEASEHOLD_DATA_DIR (or the working directory): emptied first, so it must be empty or hold a previous demo's result.json")
	pgFlag := fs.String("postgres", "", "run on PostgreSQL: the URL of a server, on which the demo makes the schema "+
		liverun.DemoSchema+" of database "+liverun.DemoDatabase+" afresh (dropping the previous demo's) and leaves it for inspection; default: a SQLite file in --dir")
	if err := parse(fs, args); err != nil {
		return fail(e, "demo", err)
	}
	if *pgFlag != "" {
		if loc, err := queue.ParseLocation(*pgFlag); err != nil || loc.Kind != queue.StorePostgres {
			return fail(e, "demo", badUsage("--postgres: %s is not a postgres:// URL", queue.RedactURL(*pgFlag)))
		}
	}
	dir, err := demoDir(*dirFlag)
	if err != nil {
		return fail(e, "demo", err)
	}
	var db string
	if *pgFlag != "" {
		if db, err = liverun.FreshPostgres(e.ctx, *pgFlag); err != nil {
			return fail(e, "demo", err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return fail(e, "demo", fmt.Errorf("find this binary: %w", err))
	}
	if err := os.RemoveAll(dir); err != nil {
		return fail(e, "demo", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(e, "demo", err)
	}
	res := liverun.Run(e.ctx, liverun.Config{Dir: dir, DB: db, Self: self, Stdout: e.stdout, IDs: randomid.Source{},
		Commit: buildVersion().Commit, Machine: liverun.Machine()})
	path := filepath.Join(dir, "result.json")
	if err := res.Write(path); err != nil {
		fmt.Fprintf(e.stderr, "leasehold demo: %v\n", err)
		res.Pass = false
	}
	liverun.Print(e.stdout, res, path)
	if !res.Pass {
		return exitFail
	}
	return exitOK
}

// demoDir checks --dir before anything is removed: it must lie inside the
// allowed directory (as sim --report's must) without being that directory,
// and, if it exists, be a directory that is empty or holds a previous
// demo's result.json. It returns the directory resolved.
func demoDir(p string) (string, error) {
	return runDir("dir", "demo", "the demo", p, func(path string) error {
		_, err := liverun.Read(path)
		return err
	})
}

// runDir checks a run's output directory (--flag) before anything in it is
// removed: inside the allowed directory and not that directory itself, and
// missing, empty, or holding a previous run's result.json, which previous
// reads. run names the run's result ("demo"), by the run as it acts ("the
// demo").
func runDir(flag, run, by, p string, previous func(path string) error) (string, error) {
	dir, err := checkedDir(flag, p)
	if err != nil {
		return "", err
	}
	root, err := allowedRoot()
	if err != nil {
		return "", err
	}
	if dir == root {
		return "", badUsage("--%s: %s is the allowed directory itself; name a directory inside it", flag, p)
	}
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return dir, nil
	case err != nil:
		return "", badUsage("--%s: %v", flag, err)
	case len(entries) == 0:
		return dir, nil
	}
	if err := previous(filepath.Join(dir, "result.json")); err != nil {
		return "", badUsage("--%s: %s is not empty and holds no previous %s's result.json, so %s will not empty it (remove it or name another directory)", flag, p, run, by)
	}
	return dir, nil
}

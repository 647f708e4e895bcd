package cli

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/liverun"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/worker"
	"github.com/leasehold/leasehold/worker/workertest"
)

func init() {
	register("worker", "run a worker process: worker --id NAME [--kinds FILE] [--concurrency N] (graceful stop on SIGTERM)", runWorker)
}

func runWorker(e *env, args []string) int {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	c := commonFlags(fs, false)
	id := fs.String("id", "", "worker name (in every claim, log line and event)")
	concurrency := fs.Int("concurrency", 1, fmt.Sprintf("tasks held at once (1 to %d)", worker.ConcurrencyMax))
	lease := fs.Duration("lease", 30*time.Second, "lease asked for per claim")
	heartbeat := fs.Duration("heartbeat", 0, "heartbeat interval (default lease/3; at most lease/2)")
	shutdownGrace := fs.Duration("shutdown-grace", 0, "how long a stop waits for claims to be released or finished; "+
		"after it the worker logs each claim it left to the reaper and exits 1 (default: the lease)")
	costCapacity := fs.Int64("cost-capacity", 0, "claim nothing new while the held tasks' unspent budget reaches this (0: no bound)")
	serviceDB := fs.String("service-db", "", "the external service's ledger file (default: next to --db)")
	serviceKind := fs.String("service-kind", string(worker.Dedup), "what the service can do: dedup, fenced, queryable or plain")
	kindsFile := fs.String("kinds", "", "a kinds file: run each kind it gives a command, and no synthetic tasks (see docs/KINDS.md)")
	if err := parse(fs, args); err != nil {
		return fail(e, "worker", err)
	}
	kind, ledger, err := workerService(c, *serviceKind, *serviceDB)
	if err != nil {
		return fail(e, "worker", err)
	}
	logger := slog.New(slog.NewJSONHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	clock := clockwork.NewRealClock()
	// The kinds the worker serves, as a registry: it claims tasks of these
	// kinds only, never one it cannot run. Without --kinds, the synthetic
	// kind; with it, the file's kinds that have a command.
	registry := worker.Kinds{model.KindSynthetic: worker.SyntheticKind()}
	if *kindsFile != "" {
		var kindsLease time.Duration
		if registry, kindsLease, err = kindHandlers(*kindsFile, clock, logger); err != nil {
			return fail(e, "worker", err)
		}
		if kindsLease > 0 && !given(fs, "lease") {
			*lease = kindsLease
		}
	}
	cfg := worker.Config{ID: *id, Handler: registry, Clock: clock, Logger: logger,
		Concurrency: *concurrency, Lease: *lease, Heartbeat: *heartbeat, CostCapacity: *costCapacity}
	if err := checkWorkerFlags(cfg, *shutdownGrace); err != nil {
		return fail(e, "worker", err)
	}
	q, err := openExisting(e.ctx, c)
	if err != nil {
		return fail(e, "worker", err)
	}
	// The service's ledger serves the synthetic payload's effects; a
	// command's effects are its own, under the queue's ledger.
	var svc *workertest.Ledger
	if registry.MakesEffects() {
		if svc, err = workertest.OpenLedger(ledger, kind, clock); err != nil {
			q.Close()
			return fail(e, "worker", err)
		}
	}
	// A shutdown that left claims may have left calls under way too; closing
	// waits for them (a statement in use cannot close), so the worker exits
	// without waiting and the database keeps only what was committed.
	leftClaims := false
	defer func() {
		closeAll := func() {
			if svc != nil {
				svc.Close()
			}
			q.Close()
		}
		if leftClaims {
			go closeAll()
			return
		}
		closeAll()
	}()
	if svc != nil {
		cfg.Service = svc
	}
	if cfg.Queue, err = liverun.WorkerQueue(q, os.Getenv); err != nil {
		return fail(e, "worker", err)
	}
	r, err := worker.NewRunner(cfg, worker.RunOptions{Housekeeper: q, Waker: q, ShutdownGrace: *shutdownGrace})
	if err != nil {
		return fail(e, "worker", err)
	}
	logger.Info("worker started", "worker", *id, "pid", os.Getpid(), "db", printableDB(*c.db), "concurrency", *concurrency,
		"lease_ms", lease.Milliseconds(), "service_kind", string(kind), "kinds", registry.Served())
	err = r.Run(e.ctx)
	awaitCommands(registry, logger)
	if err != nil {
		leftClaims = errors.Is(err, worker.ErrClaimsLeft)
		return fail(e, "worker", err)
	}
	return exitOK
}

// workerService checks --service-kind and resolves --service-db: by
// default service.db beside a database file, or in the working directory
// when the queue is on a server.
func workerService(c common, kindFlag, ledger string) (worker.ServiceKind, string, error) {
	kind, err := worker.ParseServiceKind(kindFlag)
	if err != nil {
		return "", "", badUsage("--service-kind: %v", err)
	}
	switch {
	case ledger != "":
	case c.onPostgres():
		ledger = "service.db"
	default:
		ledger = filepath.Join(filepath.Dir(*c.db), "service.db")
	}
	return kind, ledger, nil
}

// checkWorkerFlags validates every flag, as cfg and the shutdown grace,
// before a file is touched. worker.Config reads a zero concurrency as its
// default; the flag's zero is a mistake.
func checkWorkerFlags(cfg worker.Config, shutdownGrace time.Duration) error {
	if cfg.Concurrency < 1 || cfg.Concurrency > worker.ConcurrencyMax {
		return badUsage("--concurrency: must be between 1 and %d, got %d", worker.ConcurrencyMax, cfg.Concurrency)
	}
	if cfg.Lease <= 0 {
		return badUsage("--lease: must be positive, got %s", cfg.Lease)
	}
	if shutdownGrace < 0 || shutdownGrace > model.LeaseMax {
		return badUsage("--shutdown-grace: must be between 0 (the lease) and %s, got %s", model.LeaseMax, shutdownGrace)
	}
	probe := cfg
	probe.Queue, probe.Service = nopQueue{}, nopService{}
	_, err := worker.New(probe)
	return err
}

// nopQueue and nopService let the worker's configuration be validated
// before any file is opened.
type nopQueue struct{ worker.Queue }
type nopService struct{ worker.Service }

package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	_ "modernc.org/sqlite"
)

// riverConns is River's pool size. Its SQLite driver's documentation
// recommends one connection (River runs internal operations in parallel,
// which a shared SQLite file answers with SQLITE_BUSY otherwise).
const riverConns = 1

// riverQ is River v0.51.2 on its SQLite driver: a client with 10 (or 2)
// workers in one queue, fetching with a 1 ms cooldown and a 10 ms poll.
type riverQ struct{}

func (riverQ) name() string   { return riverName }
func (riverQ) postgres() bool { return false }

// discardLogger is the peers' logger: the bench prints its own figures.
var discardLogger = slog.New(slog.DiscardHandler)

// sqliteDSN is the DSN every peer opens its database with: leasehold's
// own PRAGMAs (busy_timeout first, WAL, the synchronous setting, foreign
// keys) and BEGIN IMMEDIATE.
func sqliteDSN(path, sync string) string {
	return path + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(" + sync +
		")&_pragma=foreign_keys(1)&_pragma=temp_store(MEMORY)&_txlock=immediate"
}

func openSQLite(path, sync string, conns int) (*sql.DB, error) {
	db, err := sql.Open("sqlite", sqliteDSN(path, sync))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	return db, nil
}

func sqliteVersion() string {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		return "unknown"
	}
	defer db.Close()
	var v string
	if err := db.QueryRow(`SELECT sqlite_version()`).Scan(&v); err != nil {
		return "unknown"
	}
	return v
}

// jobArgs is the bench's job: Steps checkpoint writes, then done.
type jobArgs struct {
	Steps int `json:"steps"`
}

func (jobArgs) Kind() string { return "bench" }

// progressDDL is the table a River or goqite job records its steps in:
// one autocommit upsert per step, what a user of those queues would write
// to checkpoint (unfenced: neither queue has a claim a write could name).
const progressDDL = `CREATE TABLE IF NOT EXISTS bench_progress (job TEXT PRIMARY KEY, step INTEGER NOT NULL)`

func recordSteps(ctx context.Context, db *sql.DB, job string, steps int) error {
	for i := range steps {
		if _, err := db.ExecContext(ctx, `INSERT INTO bench_progress (job, step) VALUES (?, ?)
			ON CONFLICT (job) DO UPDATE SET step = excluded.step`, job, i+1); err != nil {
			return err
		}
	}
	return nil
}

type jobWorker struct {
	river.WorkerDefaults[jobArgs]
	db *sql.DB
}

func (w *jobWorker) Work(ctx context.Context, job *river.Job[jobArgs]) error {
	return recordSteps(ctx, w.db, fmt.Sprint(job.ID), job.Args.Steps)
}

func (riverQ) client(db *sql.DB, workers int) (*river.Client[*sql.Tx], error) {
	ws := river.NewWorkers()
	river.AddWorker(ws, &jobWorker{db: db})
	cfg := &river.Config{Workers: ws, Logger: discardLogger, PollOnly: true,
		FetchCooldown: time.Millisecond, FetchPollInterval: 10 * time.Millisecond}
	if workers > 0 {
		cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}}
	}
	return river.NewClient(riversqlite.New(db), cfg)
}

func (r riverQ) create(ctx context.Context, path, sync string) (*sql.DB, error) {
	db, err := openSQLite(path, sync, riverConns)
	if err != nil {
		return nil, err
	}
	m, err := rivermigrate.New(riversqlite.New(db), nil)
	if err == nil {
		_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	}
	if err == nil {
		_, err = db.ExecContext(ctx, progressDDL)
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("river: migrate: %w", err)
	}
	return db, nil
}

func manyParams(n, steps int) []river.InsertManyParams {
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: jobArgs{Steps: steps}}
	}
	return params
}

func (r riverQ) seed(ctx context.Context, path string, n, steps int) error {
	db, err := r.create(ctx, path, "NORMAL")
	if err != nil {
		return err
	}
	defer db.Close()
	c, err := r.client(db, 0)
	if err != nil {
		return err
	}
	_, err = c.InsertMany(ctx, manyParams(n, steps))
	return err
}

func (r riverQ) work(ctx context.Context, path, sync string, workers, n, steps int) (sample, error) {
	db, err := openSQLite(path, sync, riverConns)
	if err != nil {
		return sample{}, err
	}
	defer db.Close()
	c, err := r.client(db, workers)
	if err != nil {
		return sample{}, err
	}
	return riverWork(ctx, riverName, c, n, func(ctx context.Context) (int, error) {
		var done int
		err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM river_job WHERE state = 'completed'`).Scan(&done)
		return done, err
	})
}

// awaitRiver waits for n completion events.
func awaitRiver(events <-chan *river.Event, n int) error {
	timeout := time.After(10 * time.Minute)
	for done := 0; done < n; {
		select {
		case e := <-events:
			if e.Kind != river.EventKindJobCompleted {
				return fmt.Errorf("river: job %d: %s", e.Job.ID, e.Kind)
			}
			done++
		case <-timeout:
			return errors.New("river: timed out")
		}
	}
	return nil
}

func (r riverQ) intake(ctx context.Context, path, sync string, n int, bulk bool) (sample, error) {
	db, err := r.create(ctx, path, sync)
	if err != nil {
		return sample{}, err
	}
	defer db.Close()
	c, err := r.client(db, 0)
	if err != nil {
		return sample{}, err
	}
	return riverIntake(ctx, c, n, bulk)
}

func (r riverQ) latency(ctx context.Context, path, sync string, k int) ([]time.Duration, error) {
	db, err := r.create(ctx, path, sync)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	c, err := r.client(db, 10)
	if err != nil {
		return nil, err
	}
	events, cancel := c.Subscribe(river.EventKindJobCompleted)
	defer cancel()
	completed := make(chan struct{})
	go func() {
		for range events {
			completed <- struct{}{}
		}
	}()
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	out, err := idleLatencies(k, func(int) error {
		_, err := c.Insert(ctx, jobArgs{}, nil)
		return err
	}, completed)
	return out, stopRiver(ctx, c, err)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/leasehold/leasehold/queue"
)

// The PostgreSQL cells run leasehold's PostgreSQL store and River on its
// pgx driver against the same server, each run in a schema of its own in
// the database the -postgres URL names, made for the run and dropped after
// it. Both pools have pgConns connections.
const (
	pgSync  = "PG" // the cells' "sync": the server's own settings rule
	pgConns = 12
)

// defaultPostgres is the server the bench looks for unless told otherwise
// (the one the project's tests use).
const defaultPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// probePostgres reports why the server at u cannot be used (nil: it can),
// within a few seconds.
func probePostgres(ctx context.Context, u string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var v string
	return conn.QueryRow(ctx, `SHOW server_version`).Scan(&v)
}

// pgSchema makes the schema of one run and returns the URL that names it
// (its search_path) and a function that drops it.
func pgSchema(ctx context.Context, base string, owner *pgOwner, run int) (string, func(), error) {
	// The owner's prefix (the process ID) keeps two benches on one server
	// out of each other's schemas.
	schema := owner.schema(run)
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", nil, fmt.Errorf("postgres: %s", queue.RedactURL(err.Error()))
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE; CREATE SCHEMA `+schema); err != nil {
		return "", nil, fmt.Errorf("postgres: schema %s: %w", schema, err)
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", nil, errors.New("postgres: the -postgres URL does not parse")
	}
	v := u.Query()
	v.Set("search_path", schema)
	u.RawQuery = v.Encode()
	drop := func() {
		conn, err := pgx.Connect(context.Background(), base)
		if err != nil {
			return
		}
		defer conn.Close(context.Background())
		_, _ = conn.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+schema+` CASCADE`)
		// The dropped schema's catalog rows are dead rows until a vacuum: on
		// a server whose autovacuum is off (the development machine's) they
		// pile up run after run, and every later run's connections and
		// plans read through them. Clearing them keeps the runs of one
		// bench, and of benches one after another, on the same footing. A
		// role that may not vacuum the catalogs skips it.
		_, _ = conn.Exec(context.Background(), `VACUUM pg_catalog.pg_attribute, pg_catalog.pg_class, pg_catalog.pg_depend,
			pg_catalog.pg_type, pg_catalog.pg_index, pg_catalog.pg_constraint, pg_catalog.pg_attrdef,
			pg_catalog.pg_trigger, pg_catalog.pg_proc, pg_catalog.pg_rewrite`)
	}
	return u.String(), drop, nil
}

// pgAnalyze gathers the planner's statistics of the run's schema after its
// seed, as autovacuum would within its naptime (-pg-analyze). By default
// the runs are timed unanalysed: a store whose claim slows on tables the
// server has never analysed (leasehold's claim_next did, a second a claim,
// before migration 0003's per-user index) should show it here.
func pgAnalyze(ctx context.Context, u string) error {
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return fmt.Errorf("postgres: %s", queue.RedactURL(err.Error()))
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `ANALYZE`); err != nil {
		return fmt.Errorf("postgres: analyze: %w", err)
	}
	return nil
}

// schemaOf is the search_path a run's URL names.
func schemaOf(u string) string {
	parsed, err := url.Parse(u)
	if err != nil {
		return ""
	}
	return parsed.Query().Get("search_path")
}

// riverPG is River v0.51.2 on its pgx driver (riverpgxv5): a client with
// 10 workers in one queue, fetching with a 1 ms cooldown and a 10 ms poll,
// and woken by LISTEN/NOTIFY (its default on PostgreSQL).
type riverPG struct{}

func (riverPG) name() string   { return riverPGName }
func (riverPG) postgres() bool { return true }

func (riverPG) pool(ctx context.Context, u string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		return nil, errors.New("river-pgx: the URL does not parse")
	}
	cfg.MaxConns = pgConns
	return pgxpool.NewWithConfig(ctx, cfg)
}

// nopJob is the PostgreSQL cells' River job: done at once.
type nopJob struct {
	river.WorkerDefaults[jobArgs]
}

func (nopJob) Work(context.Context, *river.Job[jobArgs]) error { return nil }

func (riverPG) client(pool *pgxpool.Pool, schema string, workers int) (*river.Client[pgx.Tx], error) {
	ws := river.NewWorkers()
	river.AddWorker(ws, &nopJob{})
	cfg := &river.Config{Workers: ws, Logger: discardLogger, Schema: schema,
		FetchCooldown: time.Millisecond, FetchPollInterval: 10 * time.Millisecond}
	if workers > 0 {
		cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}}
	}
	return river.NewClient(riverpgxv5.New(pool), cfg)
}

func (r riverPG) open(ctx context.Context, u string, migrate bool) (*pgxpool.Pool, error) {
	pool, err := r.pool(ctx, u)
	if err != nil {
		return nil, err
	}
	if migrate {
		m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schemaOf(u), Logger: discardLogger})
		if err == nil {
			_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
		}
		if err != nil {
			pool.Close()
			return nil, fmt.Errorf("river-pgx: migrate: %w", err)
		}
	}
	return pool, nil
}

func (r riverPG) seed(ctx context.Context, u string, n, _ int) error {
	pool, err := r.open(ctx, u, true)
	if err != nil {
		return err
	}
	defer pool.Close()
	c, err := r.client(pool, schemaOf(u), 0)
	if err != nil {
		return err
	}
	_, err = c.InsertMany(ctx, manyParams(n, 0))
	return err
}

// work and intake run in processes of their own (procsRun, child.go).
func (riverPG) work(context.Context, string, string, int, int, int) (sample, error) {
	return sample{}, errors.New("river-pgx: work runs in processes of its own")
}

func (riverPG) intake(context.Context, string, string, int, bool) (sample, error) {
	return sample{}, errors.New("river-pgx: intake runs in processes of its own")
}

func (riverPG) latency(context.Context, string, string, int) ([]time.Duration, error) {
	return nil, errors.New("river-pgx: no latency cell on PostgreSQL")
}

package queue

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/leasehold/leasehold/internal/broken"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue/internal/postgres"
)

// pgOldBuild is the PostgreSQL schema an older build left behind, as an
// upgrade test writes it before this build opens it: the first
// Migrations of this build's migrations, and that build's stored
// functions (Functions, a file of testdata, recorded as
// FunctionsVersion), each recorded as that build recorded them, at At.
type pgOldBuild struct {
	Migrations       int
	Functions        string
	FunctionsVersion int
	At               time.Time
}

// pgOldWriter writes through an older build's schema: this build's named
// statements that build shared (run), any SQL (exec), and that build's
// submit_one (submit). Each returns a step, run in order by
// writeOldPostgres.
type pgOldWriter struct {
	ctx context.Context
	db  *sql.DB
	set *sqlSet
	// now is pgOldBuild.At in Unix milliseconds, the time every write of
	// the schema's records carries.
	now int64
}

// run is a step executing the named statement of this build's set with
// args (sql.Named values).
func (w pgOldWriter) run(name string, args ...any) func() error {
	return func() error {
		q := w.set.queries[name]
		bound, err := bindArgs(name, q, args)
		if err != nil {
			return err
		}
		if _, err := w.db.ExecContext(w.ctx, q.text, bound...); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}
}

// exec is a step executing query with args.
func (w pgOldWriter) exec(query string, args ...any) func() error {
	return func() error {
		_, err := w.db.ExecContext(w.ctx, query, args...)
		return err
	}
}

// submit is a step calling that build's submit_one through query, which
// selects its outcome, for task id: anything but an insert is an error.
func (w pgOldWriter) submit(id, query string, args ...any) func() error {
	return func() error {
		var outcome string
		err := w.db.QueryRowContext(w.ctx, query, args...).Scan(&outcome)
		if err == nil && outcome != "inserted" {
			err = fmt.Errorf("submit %s: %s", id, outcome)
		}
		return err
	}
}

// writeOldPostgres writes the schema of build at url, then the steps
// writes returns (the test's own records, written through that build's
// functions and statements), stopping at the first that fails.
func writeOldPostgres(ctx context.Context, url string, build pgOldBuild, writes func(w pgOldWriter) []func() error) error {
	set, err := sqlOf(postgres.Store{})
	if err != nil {
		return err
	}
	body, err := os.ReadFile(filepath.Join("testdata", build.Functions))
	if err != nil {
		return err
	}
	functions, err := placeFragments(string(body))
	if err != nil {
		return fmt.Errorf("%s: %w", build.Functions, err)
	}
	functions, _, err = expandBrokenWhere(functions, func(broken.Variant) bool { return false })
	if err != nil {
		return fmt.Errorf("%s: %w", build.Functions, err)
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		return err
	}
	defer db.Close()
	w := pgOldWriter{ctx: ctx, db: db, set: set, now: model.Millis(build.At)}
	steps := []func() error{w.run("migrations_table")}
	for _, m := range set.migrations[:build.Migrations] {
		steps = append(steps, w.exec(m.SQL), w.run("migration_record", sql.Named("version", m.Version),
			sql.Named("name", m.Name), sql.Named("checksum", m.Checksum), sql.Named("now", w.now)))
	}
	steps = append(steps, w.run("functions_table"), w.exec(functions),
		w.exec("INSERT INTO schema_functions (version, checksum, applied_at) VALUES ($1, $2, $3)",
			build.FunctionsVersion, fmt.Sprintf("v%d", build.FunctionsVersion), w.now))
	steps = append(steps, writes(w)...)
	for i, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("write the schema of functions %s, step %d: %w", build.Functions, i, err)
		}
	}
	return nil
}

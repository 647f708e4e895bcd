package cli

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/kinds"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/randomid"
	"github.com/leasehold/leasehold/worker"
)

// jitter returns a random source for backoff jitter, seeded from the
// operating system.
func jitter() *rand.Rand {
	var b [16]byte
	if _, err := crand.Read(b[:]); err != nil {
		panic("leasehold: no randomness for jitter: " + err.Error())
	}
	return rand.New(rand.NewPCG(binary.LittleEndian.Uint64(b[:8]), binary.LittleEndian.Uint64(b[8:])))
}

// common holds the flags most commands share.
type common struct {
	db          *string
	json        *bool
	actor       *string
	synchronous *string
	busyTimeout *time.Duration
	// kinds is --kinds, the kinds file whose schemas check payloads; nil
	// for a command without the flag.
	kinds *string
}

// kindsFlag defines --kinds on fs for c.
func kindsFlag(fs *flag.FlagSet, c *common) {
	c.kinds = fs.String("kinds", "", "a kinds file: each kind's JSON Schema checks the payloads of its tasks, refused naming the path inside the payload and a kind it does not name (synthetic aside) is refused (without it, a kind other than synthetic takes any JSON object)")
}

func commonFlags(fs *flag.FlagSet, actor bool) common {
	c := common{
		db:          dbFlagVar(fs),
		json:        fs.Bool("json", false, "print records as JSON"),
		synchronous: fs.String("synchronous", queue.SynchronousFull, "SQLite synchronous setting: FULL, or NORMAL (can lose the last commits on power loss)"),
		busyTimeout: fs.Duration("busy-timeout", 5*time.Second, "how long to wait for another process's lock before reporting storage busy (SQLite's busy_timeout, PostgreSQL's lock_timeout)"),
	}
	if actor {
		c.actor = fs.String("actor", defaultActor(), "who acts (recorded in the audit trail)")
	}
	return c
}

// dbUsage is the --db flag's help; it states the default in words.
const dbUsage = "the database: a SQLite file `path`, or a postgres:// URL (default: $LEASEHOLD_DB, or leasehold.db when it is not set)"

// dbFlag is --db's value. Its String is empty until the flag is given, so
// that the flag package prints no default of its own beside the one
// dbUsage states (which, taken from LEASEHOLD_DB, could hold a password).
type dbFlag struct {
	value *string
	set   bool
}

func (d *dbFlag) String() string {
	if d == nil || d.value == nil || !d.set {
		return ""
	}
	return *d.value
}

func (d *dbFlag) Set(s string) error {
	*d.value, d.set = s, true
	return nil
}

// dbFlagVar defines --db on fs and returns its value, defaultDB() until
// the flag is given.
func dbFlagVar(fs *flag.FlagSet) *string {
	v := defaultDB()
	fs.Var(&dbFlag{value: &v}, "db", dbUsage)
	return &v
}

// location names the store --db (or LEASEHOLD_DB) is in. A value that names
// none is bad usage, worded without any password it holds.
func (c common) location() (queue.Location, error) {
	loc, err := queue.ParseLocation(*c.db)
	if err != nil {
		return queue.Location{}, badUsage("%v", strings.TrimSuffix(err.Error(), ": "+queue.ErrBadLocation.Error()))
	}
	return loc, nil
}

// onPostgres reports whether --db names a PostgreSQL database (false for
// a value that names no store: location refuses it).
func (c common) onPostgres() bool {
	loc, err := queue.ParseLocation(*c.db)
	return err == nil && loc.Kind == queue.StorePostgres
}

// printableDB is --db as it may be printed or logged: a URL's password
// replaced by xxxxx (and a key=value string, which location refuses,
// hidden but for its keywords).
func printableDB(db string) string { return queue.RedactURL(db) }

// defaultDB is the database a command uses without --db: LEASEHOLD_DB, or
// leasehold.db in the working directory.
func defaultDB() string {
	if db := os.Getenv("LEASEHOLD_DB"); db != "" {
		return db
	}
	return "leasehold.db"
}

// commonFor returns the shared flags at their defaults, for path: what a
// command that opens a database it names some other way (restore's
// target) opens it with.
func commonFor(path string) common {
	c := commonFlags(flag.NewFlagSet("", flag.ContinueOnError), false)
	*c.db = path
	return c
}

// withDB returns c naming path as the database (a path checked and
// resolved by the command).
func (c common) withDB(path string) common {
	c.db = &path
	return c
}

// settings checks --busy-timeout and --synchronous and returns what
// queue.Options takes for them.
func (c common) settings() (time.Duration, string, error) {
	busy := *c.busyTimeout
	switch {
	case busy < 0 || busy > time.Hour:
		return 0, "", badUsage("--busy-timeout: must be between 0 and 1h, got %s", busy)
	case busy == 0:
		busy = queue.NoBusyTimeout
	}
	sync := strings.ToUpper(*c.synchronous)
	if sync == "" {
		sync = queue.SynchronousFull
	}
	if sync != queue.SynchronousFull && sync != queue.SynchronousNormal {
		return 0, "", badUsage("--synchronous: must be FULL or NORMAL, got %q", *c.synchronous)
	}
	return busy, sync, nil
}

// defaultActor is the operating system user, or "cli".
func defaultActor() string {
	if u := os.Getenv("USER"); model.CheckName("actor", u) == nil {
		return u
	}
	return "cli"
}

// checkDBPath refuses a database path that names nothing usable.
func checkDBPath(path string) error {
	if strings.TrimSpace(path) == "" {
		return badUsage("--db: path required")
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return badUsage("--db: %s is a directory", path)
	}
	return nil
}

// openQueue opens the database for a command that writes, with the real
// clock. A database this process cannot write is refused, saying so,
// before anything is opened.
func openQueue(ctx context.Context, c common, mode queue.MigrateMode) (*queue.Queue, error) {
	loc, err := c.location()
	if err != nil {
		return nil, err
	}
	validators, err := c.validators()
	if err != nil {
		return nil, err
	}
	defaults, err := c.defaults()
	if err != nil {
		return nil, err
	}
	if loc.Kind == queue.StorePostgres {
		busy, _, err := c.settings() // --busy-timeout is PostgreSQL's lock_timeout
		if err != nil {
			return nil, err
		}
		q, err := queue.Open(ctx, queue.Options{Path: loc.URL, Clock: clockwork.NewRealClock(), IDs: randomid.Source{}, Rand: jitter(),
			Migrate: mode, BusyTimeout: busy, Validators: validators, UnknownKind: c.unknownKind(),
			Defaults: defaults})
		return q, explainOpen(loc.String(), err)
	}
	if err := checkDBPath(*c.db); err != nil {
		return nil, err
	}
	busy, sync, err := c.settings()
	if err != nil {
		return nil, err
	}
	if err := checkWritable(*c.db); err != nil {
		return nil, err
	}
	q, err := queue.Open(ctx, queue.Options{Path: *c.db, Clock: clockwork.NewRealClock(), IDs: randomid.Source{}, Rand: jitter(),
		Synchronous: sync, Migrate: mode, BusyTimeout: busy, Validators: validators, UnknownKind: c.unknownKind(),
		Defaults: defaults})
	return q, explainOpen(*c.db, err)
}

// openReader opens an existing database for a command that only reads:
// read-only (queue.Options.ReadOnly), so it works where the database
// cannot be written and changes nothing in it.
func openReader(ctx context.Context, c common) (*queue.Queue, error) {
	loc, err := c.location()
	if err != nil {
		return nil, err
	}
	if loc.Kind == queue.StorePostgres {
		busy, _, err := c.settings()
		if err != nil {
			return nil, err
		}
		q, err := queue.Open(ctx, queue.Options{Path: loc.URL, Clock: clockwork.NewRealClock(), IDs: randomid.Source{}, Rand: jitter(),
			BusyTimeout: busy, ReadOnly: true})
		return q, explainOpen(loc.String(), err)
	}
	if err := checkDBPath(*c.db); err != nil {
		return nil, err
	}
	busy, _, err := c.settings()
	if err != nil {
		return nil, err
	}
	if err := checkDBExists(*c.db); err != nil {
		return nil, err
	}
	q, err := queue.Open(ctx, queue.Options{Path: *c.db, Clock: clockwork.NewRealClock(), IDs: randomid.Source{}, Rand: jitter(),
		BusyTimeout: busy, ReadOnly: true})
	return q, explainOpen(*c.db, err)
}

// errNoDatabase: --db names no database. Only migrate makes one, so that a
// mistyped path is refused rather than taken for a new, empty queue.
var errNoDatabase = errors.New("no database")

// noDatabase is the refusal of a command whose --db names no database
// (where, as it may be printed): bad usage, saying how to make one.
func noDatabase(where string) error {
	if loc, err := queue.ParseLocation(where); err == nil && loc.Kind == queue.StorePostgres {
		return usageError{fmt.Sprintf("%v: %s has no leasehold schema: check --db (or LEASEHOLD_DB); leasehold migrate makes it",
			errNoDatabase, where)}
	}
	return usageError{fmt.Sprintf("%v at %s: check --db (or LEASEHOLD_DB); leasehold migrate --db %s makes a new one",
		errNoDatabase, where, where)}
}

// checkDBExists refuses a SQLite path where there is no database: no
// file, or an empty one.
func checkDBExists(path string) error {
	none, err := noFile(path)
	if err != nil {
		return fmt.Errorf("database %s: %w", path, err)
	}
	if none {
		return noDatabase(path)
	}
	return nil
}

// noFile reports whether a SQLite path holds no database yet: no file, or
// an empty one.
func noFile(path string) (bool, error) {
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return st.Size() == 0, nil
}

// errReadOnly: the database (or its directory, where SQLite keeps its
// -wal and -shm files) cannot be written by this process.
var errReadOnly = errors.New("database is read-only")

// checkWritable refuses a database a writer could not use: the file, or
// the directory its companions are created in, not writable by this
// process (permissions, a read-only mount, an immutable file).
func checkWritable(path string) error {
	dir := filepath.Dir(path)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if err := syscall.Access(dir, accessWrite); err != nil {
			return fmt.Errorf("%w: %s (cannot create it in %s: %v)", errReadOnly, path, dir, err)
		}
		return nil
	}
	for _, p := range []string{path, dir} {
		if err := syscall.Access(p, accessWrite); err != nil {
			return fmt.Errorf("%w: %s", errReadOnly, path)
		}
	}
	return nil
}

// accessWrite is access(2)'s W_OK.
const accessWrite = 2

// explainOpen words what an open's failure means for the command: a
// read-only database, or one that needs migrate first.
func explainOpen(path string, err error) error {
	switch {
	case err == nil:
		return nil
	case queue.ClassOf(err) == queue.ClassReadOnly:
		return fmt.Errorf("%w: %s", errReadOnly, path)
	case errors.Is(err, queue.ErrSchemaOutdated):
		return fmt.Errorf("%w; run leasehold migrate --db %s", err, path)
	case errors.Is(err, queue.ErrNoSchema):
		return noDatabase(path)
	}
	return err
}

// validators are the payload validators of the queue openQueue opens, by
// kind: the synthetic handler's, and the schemas of the kinds file
// --kinds names, if any. A kinds file that cannot be read or is refused
// is a usage error naming the file.
func (c common) validators() (map[string]model.PayloadValidator, error) {
	out := map[string]model.PayloadValidator{model.KindSynthetic: worker.ValidateSynthetic}
	if c.kinds == nil || *c.kinds == "" {
		return out, nil
	}
	f, err := kinds.Load(*c.kinds)
	if err != nil {
		return nil, badUsage("--kinds: %v", err)
	}
	for _, name := range f.Names() {
		k, _ := f.Kind(name)
		out[name] = func(payload json.RawMessage) error { return k.Validate(payload) }
	}
	return out, nil
}

// defaults are the request defaults (by kind) of the queue openQueue
// opens: those of the kinds file --kinds names, if any (none without it).
func (c common) defaults() (map[string]model.RequestDefaults, error) {
	if c.kinds == nil || *c.kinds == "" {
		return nil, nil
	}
	f, err := kinds.Load(*c.kinds)
	if err != nil {
		return nil, badUsage("--kinds: %v", err)
	}
	return f.RequestDefaults(), nil
}

// kindNames are the kinds the command knows: the synthetic kind and those
// of the kinds file --kinds names, if any.
func (c common) kindNames() ([]string, error) {
	validators, err := c.validators()
	if err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(validators)), nil
}

// checkIntakePayload refuses, as the queue opened by openQueue would, a
// payload of kind its validator refuses, or a kind --kinds does not name,
// before anything is opened.
func checkIntakePayload(c common, kind, payload string) error {
	kind, err := model.NormalizeKind("kind", kind)
	if err != nil {
		return err
	}
	validators, err := c.validators()
	if err != nil {
		return err
	}
	validate, named := validators[kind]
	if unknown := c.unknownKind(); !named && unknown != nil {
		return unknown(kind)
	}
	if validate == nil {
		return nil
	}
	if err := validate(json.RawMessage(payload)); err != nil {
		return queue.PayloadError(err)
	}
	return nil
}

// unknownKind is queue.Options.UnknownKind for the queue openQueue opens:
// with --kinds, a kind that neither the file nor the synthetic handler
// names is refused, naming the kind; without it, nil (any kind is taken).
func (c common) unknownKind() func(kind string) error {
	if c.kinds == nil || *c.kinds == "" {
		return nil
	}
	return func(kind string) error {
		return &model.ValidationError{Field: "kind", Problem: kind + " is not in the kinds file"}
	}
}

// openExisting opens for writing a database that must already exist:
// every command that writes but migrate, the one command that makes a
// database. The schema must be there and current: it is looked at
// read-only first (a SQLite file that is missing, or a database without
// the leasehold schema, is refused as no database), so that a mistyped
// --db never becomes a new, empty queue.
func openExisting(ctx context.Context, c common) (*queue.Queue, error) {
	q, err := openReader(ctx, c)
	if err != nil {
		return nil, err
	}
	q.Close()
	return openQueue(ctx, c, queue.MigrateNew)
}

// parseTime reads an RFC 3339 time or "+DURATION" from now; empty is zero.
func parseTime(field, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if rest, ok := strings.CutPrefix(s, "+"); ok {
		d, err := time.ParseDuration(rest)
		if err != nil || d < 0 {
			return time.Time{}, badUsage("--%s: %s is not +DURATION (like +30s)", field, model.Quote(s, 64))
		}
		return time.Now().Add(d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, badUsage("--%s: %s is not an RFC 3339 time or +DURATION", field, model.Quote(s, 64))
	}
	if t.IsZero() { // the zero time is out of range, not "not set"
		return time.Time{}, badUsage("--%s", model.CheckTimeRange(field, t))
	}
	return t, nil
}

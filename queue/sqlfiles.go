package queue

import (
	"bufio"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// query is one named statement of a dialect's queries.sql, as the driver
// takes it: for a positional dialect, rewritten to $n with params naming
// each number's argument (see rewriteParams); otherwise params is nil and
// the named arguments go to the driver as they are.
type query struct {
	text   string
	params []string
}

// sqlSet is what a backend's SQL files hold, loaded once per process.
type sqlSet struct {
	queries    map[string]query
	migrations []Migration
}

// Migration is one numbered schema change.
type Migration struct {
	Version  int
	Name     string // file name
	SQL      string
	Checksum string // hex SHA-256 of the file
}

// Migrations returns the SQLite migrations this build carries, in order.
// They are embedded, so they are read and hashed once per process; each
// call returns its own copy of the list.
func Migrations() ([]Migration, error) {
	set, err := sqlOf(backends[0])
	if err != nil {
		return nil, err
	}
	return slices.Clone(set.migrations), nil
}

// SchemaVersion is the newest schema version this build knows.
func SchemaVersion() int {
	ms, err := Migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

var (
	sqlMu   sync.Mutex
	sqlSets = map[string]*sqlSet{}
)

// sqlOf returns b's SQL files, read, parsed and hashed on first use; every
// queue of the dialect shares them, and nobody writes them after.
func sqlOf(b backend) (*sqlSet, error) {
	sqlMu.Lock()
	defer sqlMu.Unlock()
	if set := sqlSets[b.dialect()]; set != nil {
		return set, nil
	}
	set, err := loadSQL(b.sqlFiles(), b.positional())
	if err != nil {
		return nil, fmt.Errorf("queue: %s store: %w", b.dialect(), err)
	}
	sqlSets[b.dialect()] = set
	return set, nil
}

// loadSQL reads queries.sql and migrations/ from files.
func loadSQL(files fs.FS, positional bool) (*sqlSet, error) {
	ms, err := loadMigrations(files)
	if err != nil {
		return nil, err
	}
	texts, err := loadQueries(files)
	if err != nil {
		return nil, err
	}
	qs := make(map[string]query, len(texts))
	for name, text := range texts {
		if !positional {
			qs[name] = query{text: text}
			continue
		}
		rewritten, params := rewriteParams(text)
		qs[name] = query{text: rewritten, params: params}
	}
	return &sqlSet{queries: qs, migrations: ms}, nil
}

func loadMigrations(files fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(files, "migrations")
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		number, _, ok := strings.Cut(name, "_")
		version, err := strconv.Atoi(number)
		if !ok || err != nil || version < 1 || !strings.HasSuffix(name, ".sql") {
			return nil, fmt.Errorf("migration file %s: name must start with its number and end in .sql", name)
		}
		body, err := fs.ReadFile(files, "migrations/"+name)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", name, err)
		}
		sum := sha256.Sum256(body)
		out = append(out, Migration{Version: version, Name: name, SQL: string(body), Checksum: hex.EncodeToString(sum[:])})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration %s: expected number %d", m.Name, i+1)
		}
	}
	return out, nil
}

// loadQueries parses the named statements of every .sql file at the root
// of files (queries.sql, which must be there, and others such as
// pages.sql; not broken.sql, which only the broken build reads), and
// expands {task_columns}.
func loadQueries(files fs.FS) (map[string]string, error) {
	names, err := fs.Glob(files, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("read queries: %w", err)
	}
	if !slices.Contains(names, "queries.sql") {
		return nil, fmt.Errorf("read queries: no queries.sql")
	}
	queries := map[string]string{}
	for _, name := range names {
		if name == "broken.sql" {
			continue
		}
		body, err := fs.ReadFile(files, name)
		if err != nil {
			return nil, fmt.Errorf("read queries: %w", err)
		}
		if err := parseQueries(string(body), queries); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	if err := brokenQueries(files, queries); err != nil {
		return nil, err
	}
	columns := queries["task_columns"]
	for n, q := range queries {
		queries[n] = strings.ReplaceAll(q, "{task_columns}", columns)
	}
	return queries, nil
}

// bindArgs returns the arguments to run q with: args as they are for a
// named dialect, or the named arguments' values in q's parameter order for
// a positional one. A parameter with no argument is an error naming it;
// an argument the query does not use is ignored, as SQLite ignores it.
func bindArgs(name string, q query, args []any) ([]any, error) {
	if q.params == nil {
		return args, nil
	}
	values := make(map[string]any, len(args))
	for _, a := range args {
		named, ok := a.(sql.NamedArg)
		if !ok {
			return nil, fmt.Errorf("queue: %s: argument %T is not named", name, a)
		}
		values[named.Name] = named.Value
	}
	out := make([]any, len(q.params))
	for i, p := range q.params {
		v, ok := values[p]
		if !ok {
			return nil, fmt.Errorf("queue: %s: no argument for :%s", name, p)
		}
		out[i] = v
	}
	return out, nil
}

// parseQueries adds the "-- name: NAME" sections of body to queries.
func parseQueries(body string, queries map[string]string) error {
	var name string
	var text strings.Builder
	flush := func() {
		if name != "" {
			queries[name] = strings.TrimSpace(text.String())
		}
		text.Reset()
	}
	scanner := bufio.NewScanner(strings.NewReader(body))
	for scanner.Scan() {
		line := scanner.Text()
		if rest, ok := strings.CutPrefix(line, "-- name: "); ok {
			flush()
			name = strings.TrimSpace(rest)
			if _, dup := queries[name]; dup {
				return fmt.Errorf("queries: %s defined twice", name)
			}
			continue
		}
		if name != "" && !strings.HasPrefix(strings.TrimSpace(line), "--") {
			text.WriteString(line)
			text.WriteByte('\n')
		}
	}
	flush()
	return scanner.Err()
}

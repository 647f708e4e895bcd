package queue

import (
	"bufio"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/leasehold/leasehold/internal/broken"
	"github.com/leasehold/leasehold/queue/internal/seam"
)

// query is one named statement of a dialect's queries.sql, as the driver
// takes it: for a positional dialect, rewritten to $n with params naming
// each number's argument (see rewriteParams); otherwise params is nil and
// the named arguments go to the driver as they are.
type query struct {
	text   string
	params []string
	// variants are the broken variants whose text this query has loaded
	// under name~variant (see expandBroken); none outside the
	// leasehold_broken build.
	variants []broken.Variant
}

// sqlSet is what a backend's SQL files hold, loaded once per process.
type sqlSet struct {
	queries    map[string]query
	migrations []Migration
	// functions is the store's functions.sql, nil for a store that has
	// none (SQLite).
	functions *storeFunctions
	// folded is the history the store's baseline replaced (fold.go), nil
	// for a store that has none.
	folded *seam.Folded
}

// functionsFile is the file of a store's functions: code that migrate
// installs whole after the migrations, recorded by version and checksum.
const functionsFile = "functions.sql"

// functionsVersionPrefix starts the first line of functions.sql, which
// states the file's version.
const functionsVersionPrefix = "-- version: "

// storeFunctions is a store's functions file.
type storeFunctions struct {
	Version int
	text    string // as in the file, with its broken-variant placeholders
}

// installed returns the text migrate installs and its hex SHA-256: the
// safe text; in the leasehold_broken build, the broken text of every
// variant switched on.
func (f *storeFunctions) installed() (text, checksum string, err error) {
	return f.expanded(broken.On)
}

// expanded returns the text with the broken text of the variants on, and
// its checksum.
func (f *storeFunctions) expanded(on func(broken.Variant) bool) (text, checksum string, err error) {
	text, _, err = expandBrokenWhere(f.text, on)
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", functionsFile, err)
	}
	sum := sha256.Sum256([]byte(text))
	return text, hex.EncodeToString(sum[:]), nil
}

// loadFunctions reads functions.sql from files, or nil when there is none.
func loadFunctions(files fs.FS) (*storeFunctions, error) {
	body, err := fs.ReadFile(files, functionsFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", functionsFile, err)
	}
	first, _, _ := strings.Cut(string(body), "\n")
	number, ok := strings.CutPrefix(first, functionsVersionPrefix)
	version, err := strconv.Atoi(strings.TrimSpace(number))
	if !ok || err != nil || version < 1 {
		return nil, fmt.Errorf("%s: the first line must be %q and a version from 1", functionsFile, functionsVersionPrefix+"N")
	}
	text, err := placeFragments(string(body))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", functionsFile, err)
	}
	return &storeFunctions{Version: version, text: text}, nil
}

// The fragments of a functions file: a block written once, between a line
// fragmentOpen NAME and a line fragmentClose, placed wherever
// {fragment:NAME} stands.
const (
	fragmentOpen        = "-- fragment: "
	fragmentClose       = "-- end fragment"
	fragmentPlaceholder = "{fragment:"
)

// placeholderShownMax bounds how much of an unknown placeholder an error
// quotes.
const placeholderShownMax = 40

// placeFragments takes the fragments out of text and puts each where its
// placeholders stand. A placeholder of no fragment, a fragment placed
// nowhere, or one left open is an error.
func placeFragments(text string) (string, error) {
	fragments := map[string]string{}
	var out, block strings.Builder
	name := ""
	for _, line := range strings.SplitAfter(text, "\n") {
		trimmed := strings.TrimRight(line, "\n")
		switch {
		case name == "" && strings.HasPrefix(trimmed, fragmentOpen):
			name = strings.TrimSpace(strings.TrimPrefix(trimmed, fragmentOpen))
			if _, dup := fragments[name]; dup || name == "" {
				return "", fmt.Errorf("fragment %q defined twice or unnamed", name)
			}
		case name != "" && trimmed == fragmentClose:
			fragments[name] = strings.TrimSuffix(block.String(), "\n")
			name = ""
			block.Reset()
		case name != "":
			block.WriteString(line)
		default:
			out.WriteString(line)
		}
	}
	if name != "" {
		return "", fmt.Errorf("fragment %s is not closed", name)
	}
	placed := out.String()
	for name, body := range fragments {
		placeholder := fragmentPlaceholder + name + "}"
		if !strings.Contains(placed, placeholder) {
			return "", fmt.Errorf("fragment %s is placed nowhere", name)
		}
		placed = strings.ReplaceAll(placed, placeholder, body)
	}
	if i := strings.Index(placed, fragmentPlaceholder); i >= 0 {
		end := min(i+placeholderShownMax, len(placed))
		return "", fmt.Errorf("no fragment for %s", placed[i:end])
	}
	return placed, nil
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
	if set := sqlSets[b.Dialect()]; set != nil {
		return set, nil
	}
	set, err := loadSQL(b.SQLFiles(), b.Positional())
	if err != nil {
		return nil, fmt.Errorf("queue: %s store: %w", b.Dialect(), err)
	}
	set.folded = b.Folded()
	sqlSets[b.Dialect()] = set
	return set, nil
}

// loadSQL reads queries.sql and migrations/ from files.
func loadSQL(files fs.FS, positional bool) (*sqlSet, error) {
	ms, err := loadMigrations(files)
	if err != nil {
		return nil, err
	}
	functions, err := loadFunctions(files)
	if err != nil {
		return nil, err
	}
	texts, err := loadQueries(files)
	if err != nil {
		return nil, err
	}
	qs := make(map[string]query, len(texts))
	add := func(name, text string, variants []broken.Variant) {
		q := query{text: text, variants: variants}
		if positional {
			q.text, q.params = rewriteParams(text)
		}
		qs[name] = q
	}
	for name, text := range texts {
		safe, variants, err := expandBroken(text, 0)
		if err != nil {
			return nil, fmt.Errorf("query %s: %w", name, err)
		}
		if !broken.Built {
			add(name, safe, nil)
			continue
		}
		add(name, safe, variants)
		for _, v := range variants {
			text, _, err := expandBroken(text, v)
			if err != nil {
				return nil, fmt.Errorf("query %s: %w", name, err)
			}
			add(name+"~"+v.String(), text, nil)
		}
	}
	return &sqlSet{queries: qs, migrations: ms, functions: functions}, nil
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
// pages.sql), and expands {task_columns}.
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
		if name == functionsFile {
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
	columns := queries["task_columns"]
	for n, q := range queries {
		queries[n] = strings.ReplaceAll(q, "{task_columns}", columns)
	}
	return queries, nil
}

// brokenOpen opens a placeholder for a broken variant in a query:
// {broken:VARIANT|safe text|broken text}, either text possibly empty,
// neither holding | or }.
const brokenOpen = "{broken:"

// expandBroken fills the broken-variant placeholders of text: each with
// its safe text, but for variant on (0: none), whose placeholders get
// their broken text. It returns the variants text names, in order of first
// appearance; an unknown variant or a malformed placeholder is an error.
func expandBroken(text string, on broken.Variant) (string, []broken.Variant, error) {
	return expandBrokenWhere(text, func(v broken.Variant) bool { return v == on })
}

// expandBrokenWhere is expandBroken with the broken text of every variant
// for which on is true.
func expandBrokenWhere(text string, on func(broken.Variant) bool) (string, []broken.Variant, error) {
	var out strings.Builder
	var variants []broken.Variant
	for {
		start := strings.Index(text, brokenOpen)
		if start < 0 {
			out.WriteString(text)
			return out.String(), variants, nil
		}
		end := strings.IndexByte(text[start:], '}')
		if end < 0 {
			return "", nil, fmt.Errorf("unclosed %s placeholder", brokenOpen)
		}
		parts := strings.Split(text[start+len(brokenOpen):start+end], "|")
		if len(parts) != 3 {
			return "", nil, fmt.Errorf("placeholder %s: want {broken:VARIANT|safe|broken}", text[start:start+end+1])
		}
		v, err := broken.Parse(parts[0])
		if err != nil {
			return "", nil, err
		}
		if !slices.Contains(variants, v) {
			variants = append(variants, v)
		}
		fill := parts[1]
		if on(v) {
			fill = parts[2]
		}
		out.WriteString(text[:start])
		out.WriteString(fill)
		text = text[start+end+1:]
	}
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

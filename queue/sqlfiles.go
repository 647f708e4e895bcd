package queue

import (
	"bufio"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
)

//go:embed sql/sqlite/migrations/*.sql sql/sqlite/queries.sql sql/sqlite/pages.sql
var sqliteFiles embed.FS

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
	ms, err := migrations()
	return slices.Clone(ms), err
}

// migrations reads and hashes the embedded migration files once.
var migrations = sync.OnceValues(loadMigrations)

func loadMigrations() ([]Migration, error) {
	entries, err := fs.ReadDir(sqliteFiles, "sql/sqlite/migrations")
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		number, _, ok := strings.Cut(name, "_")
		version, err := strconv.Atoi(number)
		if !ok || err != nil || version < 1 {
			return nil, fmt.Errorf("migration file %s: name must start with its number", name)
		}
		body, err := sqliteFiles.ReadFile("sql/sqlite/migrations/" + name)
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

// SchemaVersion is the newest schema version this build knows.
func SchemaVersion() int {
	ms, err := Migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

// loadQueries parses queries.sql into named statements, expanding
// {task_columns}.
func loadQueries() (map[string]string, error) {
	body, err := sqliteFiles.ReadFile("sql/sqlite/queries.sql")
	if err != nil {
		return nil, fmt.Errorf("read queries: %w", err)
	}
	queries := map[string]string{}
	if err := parseQueries(string(body), queries); err != nil {
		return nil, err
	}
	pages, err := sqliteFiles.ReadFile("sql/sqlite/pages.sql")
	if err != nil {
		return nil, fmt.Errorf("read queries: %w", err)
	}
	if err := parseQueries(string(pages), queries); err != nil {
		return nil, err
	}
	if err := brokenQueries(queries); err != nil {
		return nil, err
	}
	columns := queries["task_columns"]
	for n, q := range queries {
		queries[n] = strings.ReplaceAll(q, "{task_columns}", columns)
	}
	return queries, nil
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

package queue

import (
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

//go:embed sql/postgres/migrations/*.sql sql/postgres/queries.sql
var postgresFiles embed.FS

// PostgresMigrations returns the PostgreSQL migrations this build carries,
// in order. Each call returns its own copy of the list.
func PostgresMigrations() ([]Migration, error) {
	ms, err := postgresMigrations()
	return slices.Clone(ms), err
}

var postgresMigrations = sync.OnceValues(func() ([]Migration, error) {
	return readMigrations(postgresFiles, "sql/postgres/migrations")
})

// readMigrations reads the numbered migration files of dir, hashes each,
// and checks that they are numbered 1, 2, 3... with no gap.
func readMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
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
		body, err := fs.ReadFile(fsys, dir+"/"+name)
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

// pgQuery is one statement of the PostgreSQL store: its text with the
// named parameters rewritten to $1, $2, ..., and the names in that order.
type pgQuery struct {
	Text   string
	Params []string
}

// postgresQueries parses the PostgreSQL queries.sql, expands
// {task_columns} and rewrites every :name parameter to $n (pgx's
// database/sql adapter binds by position and takes no sql.Named). The
// driver wrapper (pgconn.go) puts a call's sql.Named arguments in Params
// order.
var postgresQueries = sync.OnceValues(loadPostgresQueries)

func loadPostgresQueries() (map[string]pgQuery, error) {
	body, err := postgresFiles.ReadFile("sql/postgres/queries.sql")
	if err != nil {
		return nil, fmt.Errorf("read postgres queries: %w", err)
	}
	raw := map[string]string{}
	if err := parseQueries(string(body), raw); err != nil {
		return nil, fmt.Errorf("postgres %w", err)
	}
	columns := raw["task_columns"]
	out := make(map[string]pgQuery, len(raw))
	for name, text := range raw {
		if name == "task_columns" {
			continue
		}
		rewritten, params, err := rewriteNamed(strings.ReplaceAll(text, "{task_columns}", columns))
		if err != nil {
			return nil, fmt.Errorf("postgres query %s: %w", name, err)
		}
		out[name] = pgQuery{Text: rewritten, Params: params}
	}
	return out, nil
}

// rewriteNamed rewrites the :name parameters of a PostgreSQL statement to
// $1, $2, ... in order of first appearance (a name used twice is one
// parameter) and returns the names in that order. It leaves alone what is
// not a parameter: :: casts, string literals, quoted identifiers, comments
// and dollar-quoted bodies. A $n already in the text is refused: a query
// is written with names only.
func rewriteNamed(text string) (string, []string, error) {
	var out strings.Builder
	var names []string
	index := map[string]int{}
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case c == '\'' || c == '"':
			end := quotedEnd(text, i)
			if end < 0 {
				return "", nil, fmt.Errorf("unterminated %c quote at byte %d", c, i)
			}
			out.WriteString(text[i:end])
			i = end
		case c == '-' && strings.HasPrefix(text[i:], "--"):
			end := strings.IndexByte(text[i:], '\n')
			if end < 0 {
				end = len(text) - i
			}
			out.WriteString(text[i : i+end])
			i += end
		case c == '$':
			tag := dollarTag(text[i:])
			if tag == "" {
				return "", nil, fmt.Errorf("positional parameter at byte %d: write :name", i)
			}
			end := strings.Index(text[i+len(tag):], tag)
			if end < 0 {
				return "", nil, fmt.Errorf("unterminated %s body at byte %d", tag, i)
			}
			end += i + 2*len(tag)
			out.WriteString(text[i:end])
			i = end
		case c == ':' && strings.HasPrefix(text[i:], "::"):
			out.WriteString("::")
			i += 2
		case c == ':' && i+1 < len(text) && isNameStart(text[i+1]):
			j := i + 1
			for j < len(text) && isNamePart(text[j]) {
				j++
			}
			name := text[i+1 : j]
			n, ok := index[name]
			if !ok {
				names = append(names, name)
				n = len(names)
				index[name] = n
			}
			out.WriteString("$" + strconv.Itoa(n))
			i = j
		default:
			out.WriteByte(c)
			i++
		}
	}
	return out.String(), names, nil
}

// quotedEnd returns the index just past the quoted run that starts at i
// (a doubled quote inside it is an escaped one), or -1.
func quotedEnd(text string, i int) int {
	q := text[i]
	for j := i + 1; j < len(text); j++ {
		if text[j] != q {
			continue
		}
		if j+1 < len(text) && text[j+1] == q {
			j++
			continue
		}
		return j + 1
	}
	return -1
}

// dollarTag returns the dollar-quote tag ($$ or $tag$) s starts with, or
// "" when s starts with a positional parameter or a lone $.
func dollarTag(s string) string {
	for j := 1; j < len(s); j++ {
		switch {
		case s[j] == '$':
			return s[:j+1]
		case !isNamePart(s[j]) || (j == 1 && !isNameStart(s[j])):
			return ""
		}
	}
	return ""
}

func isNameStart(c byte) bool { return c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') }

func isNamePart(c byte) bool { return isNameStart(c) || ('0' <= c && c <= '9') }

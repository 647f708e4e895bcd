package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/leasehold/leasehold/reports"
)

// writeReport writes index.html, NAME.md and NAME.json into dir.
func writeReport(dir, name string, r reports.Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range []struct {
		name   string
		render func(*bytes.Buffer, reports.Report) error
	}{
		{name + ".json", func(b *bytes.Buffer, r reports.Report) error { return reports.JSON(b, r) }},
		{name + ".md", func(b *bytes.Buffer, r reports.Report) error { return reports.Markdown(b, r) }},
		{"index.html", func(b *bytes.Buffer, r reports.Report) error { return reports.HTML(b, r) }},
	} {
		var b bytes.Buffer
		if err := f.render(&b, r); err != nil {
			return fmt.Errorf("render %s: %w", f.name, err)
		}
		if err := reports.WriteFile(filepath.Join(dir, f.name), b.Bytes()); err != nil {
			return err
		}
	}
	return nil
}

// reportDir checks a report directory before anything runs: inside the
// allowed directory (LEASEHOLD_DATA_DIR, or the working directory), not a
// file, and resolved through its nearest existing ancestor so a symbolic
// link cannot lead outside.
func reportDir(p string) (string, error) { return checkedDir("report", p) }

// checkedDir checks the directory flag --field names (p) as reportDir
// describes and returns it resolved.
func checkedDir(field, p string) (string, error) {
	if strings.TrimSpace(p) == "" {
		return "", badUsage("--%s: directory required", field)
	}
	root, err := allowedRoot()
	if err != nil {
		return "", err
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", badUsage("--%s: %v", field, err)
	}
	existing, rest := abs, ""
	for {
		if _, err := os.Lstat(existing); err == nil {
			break
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			break
		}
		rest = filepath.Join(filepath.Base(existing), rest)
		existing = parent
	}
	resolved, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return "", badUsage("--%s: %s: %v", field, p, err)
	}
	resolved = filepath.Join(resolved, rest)
	if err := inside(field, p, root, resolved); err != nil {
		return "", err
	}
	if fi, err := os.Stat(resolved); err == nil && !fi.IsDir() {
		return "", badUsage("--%s: %s is a file, not a directory", field, p)
	}
	return resolved, nil
}

package reports

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteFile writes data to path as a report file: into a new temporary
// file beside it, synced, then renamed over path. A reader never sees a
// half-written report, a crash leaves the last whole one, and a symbolic
// link at path is replaced, never written through: rename acts on the
// name, so a link an operator (or anyone who could write the directory)
// left there cannot send the report over a file elsewhere.
func WriteFile(path string, data []byte) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			os.Remove(tmp.Name())
		}
	}()
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(0o644) // CreateTemp makes it 0600; a report is for reading
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

package command

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/leasehold/leasehold/model"
)

// lineWriter splits what is written to it into lines, keeping at most
// most bytes of each, and hands each line ended to end (under its lock).
type lineWriter struct {
	mu      sync.Mutex
	most    int
	current []byte
	end     func(line []byte)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if room := w.most - len(w.current); room > 0 {
			w.current = append(w.current, chunk[:min(room, len(chunk))]...)
		}
		if i < 0 {
			break
		}
		w.endLine()
		p = p[i+1:]
	}
	return n, nil
}

// endLine hands the line being written to end; the caller holds the lock.
func (w *lineWriter) endLine() {
	w.end(bytes.TrimRight(w.current, "\r"))
	w.current = w.current[:0]
}

// flush ends a last line written without its newline.
func (w *lineWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.current) > 0 {
		w.endLine()
	}
}

// lastLine keeps the last non-empty line written to it, at most
// model.ResultMax bytes of it (cut at a character's boundary); it holds
// no more than that however much is written.
type lastLine struct {
	lineWriter
	last []byte
}

func newLastLine() *lastLine {
	l := &lastLine{}
	l.most = model.ResultMax
	l.end = func(line []byte) {
		if len(bytes.TrimSpace(line)) > 0 {
			l.last = append(l.last[:0], line...)
		}
	}
	return l
}

// result returns the last non-empty line, a final line without its
// newline included, as valid UTF-8.
func (l *lastLine) result() string {
	l.flush()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.last
	for len(b) > 0 && !utf8.Valid(b) {
		b = b[:len(b)-1] // a character cut at the bound
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// logLines logs each line written to it, each cut to StderrLineMax
// bytes, at most StderrLinesMax lines, then one line saying how many more
// were dropped.
type logLines struct {
	lineWriter
	log     *slog.Logger
	logged  int
	dropped int
}

func newLogLines(log *slog.Logger) *logLines {
	l := &logLines{log: log}
	l.most = StderrLineMax
	l.end = func(line []byte) {
		if l.logged >= StderrLinesMax {
			l.dropped++
			return
		}
		l.logged++
		l.log.Info("command stderr", "line", strings.ToValidUTF8(string(line), "\uFFFD"))
	}
	return l
}

// close logs a last line without its newline, and how many were dropped.
func (l *logLines) close() {
	l.flush()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dropped > 0 {
		l.log.Warn("command stderr cut", "lines_dropped", l.dropped, "lines_logged", l.logged)
	}
}

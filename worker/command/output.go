package command

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/leasehold/leasehold/model"
)

// lastLine keeps the last non-empty line written to it, at most
// model.ResultMax bytes of it (cut at a character's boundary); it holds
// no more than that however much is written.
type lastLine struct {
	mu      sync.Mutex
	current []byte // the line being written, cut to ResultMax
	last    []byte // the last non-empty line ended
}

func (l *lastLine) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if room := model.ResultMax - len(l.current); room > 0 {
			l.current = append(l.current, chunk[:min(room, len(chunk))]...)
		}
		if i < 0 {
			break
		}
		l.endLine()
		p = p[i+1:]
	}
	return n, nil
}

func (l *lastLine) endLine() {
	if len(bytes.TrimSpace(l.current)) > 0 {
		l.last = append(l.last[:0], l.current...)
	}
	l.current = l.current[:0]
}

// result returns the last non-empty line, a final line without its
// newline included, as valid UTF-8 without a trailing carriage return.
func (l *lastLine) result() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.endLine()
	b := bytes.TrimRight(l.last, "\r")
	for len(b) > 0 && !utf8.Valid(b) {
		b = b[:len(b)-1] // a character cut at the bound
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// logLines logs each line written to it, each cut to StderrLineMax
// bytes, at most StderrLinesMax lines, then one line saying the rest was
// dropped.
type logLines struct {
	mu      sync.Mutex
	log     *slog.Logger
	current []byte
	logged  int
	dropped int
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if room := StderrLineMax - len(l.current); room > 0 {
			l.current = append(l.current, chunk[:min(room, len(chunk))]...)
		}
		if i < 0 {
			break
		}
		l.emit()
		p = p[i+1:]
	}
	return n, nil
}

func (l *logLines) emit() {
	line := strings.ToValidUTF8(string(bytes.TrimRight(l.current, "\r")), "\uFFFD")
	l.current = l.current[:0]
	if l.logged >= StderrLinesMax {
		l.dropped++
		return
	}
	l.logged++
	l.log.Info("command stderr", "line", line)
}

// flush logs a last line without its newline, and how many were dropped.
func (l *logLines) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.current) > 0 {
		l.emit()
	}
	if l.dropped > 0 {
		l.log.Warn("command stderr cut", "lines_dropped", l.dropped, "lines_logged", l.logged)
	}
}

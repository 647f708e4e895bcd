package cli

// The examples of README.md and docs/API.md, run: every code block of
// either file is a shell block (each command run by bash, as a reader
// would run it), a data block the run uses or checks (the tokens file,
// an error body, an event stream), or Go (compiled by
// TestDocGoBlocksCompile). A block of none of these kinds fails the test,
// so an example cannot be added without being run.
//
// Shell commands run with bin/leasehold and leasehold on PATH being this
// test binary (asBinary), in a temporary working directory that is also
// LEASEHOLD_DATA_DIR. docs/API.md's curl commands go to a real server
// (httptest, over TCP) of a temporary database made with migrate, with
// the tokens file of docs/API.md; each must be answered with a 2xx. Its
// command-line examples read that database (LEASEHOLD_DB). README's
// commands make and use q.db in the working directory.
//
// Placeholders stand for values a reader would have: t_0123abcd for a task
// in the state its command needs (a fresh one for each), s_0123abcd for a
// schedule, $NEXT for a page's next, TASK_ID for the ID README's submit
// printed; http://127.0.0.1:8080 is the test server, and README's serve
// listens on a free port instead of 8080. Commands that run until stopped
// (curl -N, --follow, --watch, worker, serve) are stopped with SIGTERM
// once they have shown what they are for (a --watch ends by itself when
// its task is cancelled). README's make demo and make test are checked
// with make -n (TestDocMakeTargetsExist): make test runs this test, and
// make demo is the live run, half a minute of worker processes.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/httpapi"
	"github.com/leasehold/leasehold/internal/doctest"
	"github.com/leasehold/leasehold/internal/testkit"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/randomid"
)

// docCommandMax bounds one command of the documents, and the wait for a
// command that runs until stopped to show its first output.
const docCommandMax = 60 * time.Second

// repoRoot is the repository's root, from this package's directory.
var repoRoot = filepath.Join("..", "..", "..", "..")

// docBlock is one code block of a Markdown file.
type docBlock struct {
	file  string
	line  int    // the line of its first line, from 1
	lang  string // a fenced block's language; "" for an indented block
	lines []string
}

func (b docBlock) String() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// markdownBlocks returns the code blocks of the Markdown file at path
// (relative to the repository's root): fenced blocks, and blocks indented
// by four spaces after a blank line.
func markdownBlocks(t *testing.T, path string) []docBlock {
	t.Helper()
	body, err := os.ReadFile(filepath.Join(repoRoot, path))
	require.NoError(t, err)
	var blocks []docBlock
	var cur *docBlock
	fenced, prevBlank := false, true
	flush := func() {
		if cur != nil {
			for len(cur.lines) > 0 && strings.TrimSpace(cur.lines[len(cur.lines)-1]) == "" {
				cur.lines = cur.lines[:len(cur.lines)-1]
			}
			blocks = append(blocks, *cur)
			cur = nil
		}
	}
	for i, line := range strings.Split(string(body), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case fenced && strings.HasPrefix(trimmed, "```"):
			fenced = false
			flush()
		case fenced:
			cur.lines = append(cur.lines, line)
		case strings.HasPrefix(trimmed, "```"):
			flush()
			fenced = true
			cur = &docBlock{file: path, line: i + 2, lang: strings.TrimPrefix(trimmed, "```")}
		case strings.HasPrefix(line, "    ") && (cur != nil || prevBlank):
			if cur == nil {
				cur = &docBlock{file: path, line: i + 1}
			}
			cur.lines = append(cur.lines, strings.TrimPrefix(line, "    "))
		case trimmed == "" && cur != nil:
			cur.lines = append(cur.lines, "")
		default:
			flush()
		}
		prevBlank = trimmed == ""
	}
	flush()
	return blocks
}

// commands returns a shell block's commands as the shell reads them:
// comments dropped, a line ending in a backslash or inside a quoted string
// joined with the next.
func (b docBlock) commands() []string {
	var out []string
	var cur strings.Builder
	var quote rune // the open quote, or 0
	for _, line := range b.lines {
		prev := ' '
		for _, r := range line {
			switch {
			case quote != 0 && r == quote:
				quote = 0
			case quote != 0:
			case r == '\'' || r == '"':
				quote = r
			case r == '#' && (prev == ' ' || prev == '\t'):
				goto endOfLine // a comment
			}
			cur.WriteRune(r)
			prev = r
		}
	endOfLine:
		text := strings.TrimRight(cur.String(), " \t")
		switch {
		case quote != 0:
			cur.WriteString("\n")
			continue
		case strings.HasSuffix(text, "\\"):
			cur.Reset()
			cur.WriteString(strings.TrimSuffix(text, "\\"))
			continue
		}
		cur.Reset()
		if cmd := strings.TrimSpace(text); cmd != "" {
			out = append(out, cmd)
		}
	}
	return out
}

// docShellWords are the commands a shell block may run.
var docShellWords = []string{"curl", "leasehold", "bin/leasehold", "export", "make"}

// isShell reports whether every command of b is one a shell block may run.
func (b docBlock) isShell() bool {
	cmds := b.commands()
	for _, c := range cmds {
		word, _, _ := strings.Cut(c, " ")
		if !slices.Contains(docShellWords, word) {
			return false
		}
	}
	return len(cmds) > 0 && b.lang != "go"
}

// docShell runs the documents' commands.
type docShell struct {
	t    *testing.T
	work string   // the working directory and LEASEHOLD_DATA_DIR
	env  []string // the commands' environment, without the exports
	vars map[string]string
	subs []string // old, new pairs replaced in each command
	// before runs before each command, given it, to prepare what the
	// command's placeholders stand for; after runs once a command that
	// runs until stopped has shown its first output; running, given its
	// output so far, before such a command (but a --watch) is stopped.
	before  func(cmd string)
	after   func(cmd string)
	running func(cmd, output string)
}

// newDocShell makes the working directory with bin/leasehold in it.
func newDocShell(t *testing.T) *docShell {
	t.Helper()
	work, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	self, err := os.Executable()
	require.NoError(t, err)
	bin := filepath.Join(work, "bin")
	require.NoError(t, os.Mkdir(bin, 0o755))
	script := fmt.Sprintf("#!/bin/sh\n%s=1 exec %q \"$@\"\n", asBinary, self)
	require.NoError(t, os.WriteFile(filepath.Join(bin, "leasehold"), []byte(script), 0o755))
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASEHOLD_") && !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	env = append(env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "LEASEHOLD_DATA_DIR="+work)
	return &docShell{t: t, work: work, env: env, vars: map[string]string{},
		before: func(string) {}, after: func(string) {}, running: func(string, string) {}}
}

// run runs the commands of a shell block in order.
func (s *docShell) run(b docBlock, check func(cmd string, r docResult)) {
	s.t.Helper()
	for _, cmd := range b.commands() {
		if strings.HasPrefix(cmd, "make ") {
			continue // TestDocMakeTargetsExist
		}
		if rest, ok := strings.CutPrefix(s.substitute(cmd), "export "); ok {
			for _, kv := range strings.Fields(rest) {
				k, v, ok := strings.Cut(kv, "=")
				require.True(s.t, ok, "%s: %q is not NAME=VALUE", b, kv)
				s.vars[k] = v
			}
			continue
		}
		s.before(cmd)
		cmd = s.substitute(cmd)
		r := s.exec(b, cmd)
		s.t.Logf("%s: %s: exit %d", b, cmd, r.code)
		check(cmd, r)
	}
}

// substitute replaces the placeholders of cmd.
func (s *docShell) substitute(cmd string) string {
	for i := 0; i < len(s.subs); i += 2 {
		cmd = strings.ReplaceAll(cmd, s.subs[i], s.subs[i+1])
	}
	return cmd
}

// docResult is what one command did.
type docResult struct {
	code           int
	stdout, stderr string
}

func (r docResult) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// until reports, for a command that runs until stopped, the output that
// shows it is working; "" for a command that ends by itself.
func until(cmd string) string {
	switch {
	case strings.HasPrefix(cmd, "curl") && strings.Contains(cmd, " -sN "):
		return "event: event"
	case strings.Contains(cmd, " --follow"), strings.Contains(cmd, " --watch"):
		return "\n"
	case strings.HasPrefix(cmd, "bin/leasehold worker"):
		return `"msg":"worker started"`
	case strings.HasPrefix(cmd, "bin/leasehold serve"), strings.HasPrefix(cmd, "leasehold serve"):
		return `"msg":"serving"`
	}
	return ""
}

// exec runs one command under bash (nounset: a placeholder left unset
// fails), in the working directory, with the exports so far.
func (s *docShell) exec(b docBlock, cmd string) docResult {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), docCommandMax)
	defer cancel()
	c := exec.CommandContext(ctx, "bash", "-u", "-c", "exec "+cmd)
	c.Dir = s.work
	c.Env = append([]string(nil), s.env...)
	for k, v := range s.vars {
		c.Env = append(c.Env, k+"="+v)
	}
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := newWatched()
	var errOut testkit.SyncBuffer
	c.Stdout = out
	c.Stderr = io.MultiWriter(&errOut, stderrOf{out})
	require.NoError(s.t, c.Start(), "%s: %s", b, cmd)
	waited := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		waited <- c.Wait()
		close(exited)
	}()
	if want := until(cmd); want != "" {
		if !out.waitFor(ctx, want, exited) {
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			<-exited
			s.t.Fatalf("%s: %s showed no %q (within %s, or before it exited)\nstdout and stderr:\n%s", b, cmd, want, docCommandMax, out.String())
		}
		if strings.Contains(cmd, " --watch") {
			s.after(cmd) // the task ends; so does the watch
		} else {
			s.running(cmd, out.String())
			require.NoError(s.t, syscall.Kill(-c.Process.Pid, syscall.SIGTERM))
		}
	}
	err := <-waited
	code := 0
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
		if status, ok := exit.Sys().(syscall.WaitStatus); ok && status.Signaled() {
			code = 128 + int(status.Signal())
		}
	} else if err != nil {
		s.t.Fatalf("%s: %s: %v", b, cmd, err)
	}
	return docResult{code: code, stdout: out.stdout(), stderr: errOut.String()}
}

// watched is a command's output that a test can wait on.
type watched struct {
	mu      sync.Mutex
	all     bytes.Buffer // stdout and stderr as written
	out     bytes.Buffer // stdout alone
	changed chan struct{}
}

func newWatched() *watched { return &watched{changed: make(chan struct{})} }

// Write is stdout's.
func (w *watched) Write(p []byte) (int, error) { return w.write(p, true) }

func (w *watched) write(p []byte, stdout bool) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all.Write(p)
	if stdout {
		w.out.Write(p)
	}
	close(w.changed)
	w.changed = make(chan struct{})
	return len(p), nil
}

// waitFor waits until the output holds want, or ctx ends, or exited is
// closed (the command ended) without it.
func (w *watched) waitFor(ctx context.Context, want string, exited <-chan struct{}) bool {
	for {
		w.mu.Lock()
		found, changed := strings.Contains(w.all.String(), want), w.changed
		w.mu.Unlock()
		if found {
			return true
		}
		select {
		case <-changed:
		case <-exited:
			return strings.Contains(w.String(), want)
		case <-ctx.Done():
			return false
		}
	}
}

func (w *watched) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.all.String()
}

func (w *watched) stdout() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.out.String()
}

// stderrOf makes w's writes count as stderr's (they are kept in all only).
type stderrOf struct{ w *watched }

func (e stderrOf) Write(p []byte) (int, error) { return e.w.write(p, false) }

// apiDoc is docs/API.md's run: its server, its database and what its
// placeholders stand for.
type apiDoc struct {
	t      *testing.T
	shell  *docShell
	prep   *queue.Queue // the test's own handle of the server's database
	server *httptest.Server
	tokens string // the tokens file

	mu       sync.Mutex
	answered []string // each answer's status and request, as it was sent
}

// wrap records each answer's status when its header is written (an event
// stream's long before its handler returns).
func (a *apiDoc) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&statusOf{ResponseWriter: w, record: func(status int) {
			a.mu.Lock()
			a.answered = append(a.answered, fmt.Sprintf("%d %s %s", status, r.Method, r.URL.RequestURI()))
			a.mu.Unlock()
		}}, r)
	})
}

// statusOf calls record with the status of the answer, once.
type statusOf struct {
	http.ResponseWriter
	record   func(int)
	recorded bool
}

func (s *statusOf) WriteHeader(code int) {
	if !s.recorded {
		s.recorded = true
		s.record(code)
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusOf) Write(p []byte) (int, error) {
	if !s.recorded {
		s.WriteHeader(http.StatusOK)
	}
	return s.ResponseWriter.Write(p)
}

func (s *statusOf) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusOf) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// answers returns the answers since mark.
func (a *apiDoc) answers(mark int) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.answered[mark:]...)
}

func (a *apiDoc) mark() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.answered)
}

// docPayload and friends are the payloads of the tasks the placeholders
// stand for.
const (
	docGatePayload   = `{"steps":[{"approval":"manager"},{"cost":1}]}`
	docEffectPayload = `{"steps":[{"cost":1},{"cost":1,"effect":"charge"}]}`
)

// submit submits a task of alice's at priority and returns its ID. The
// tasks the test drives are submitted at the top priority, so that its
// claims take them, and are never left queued.
func (a *apiDoc) submit(payload string, priority int) string {
	a.t.Helper()
	if priority == model.PriorityMax { // an example may have queued a driven task again (approve)
		queued, err := a.prep.List(context.Background(), model.ListFilter{State: model.Queued, Limit: model.ListLimitMax})
		require.NoError(a.t, err)
		for _, task := range queued {
			if task.Priority == model.PriorityMax {
				_, err := a.prep.Cancel(context.Background(), task.ID, "doc")
				require.NoError(a.t, err)
			}
		}
	}
	res, err := a.prep.Submit(context.Background(), model.SubmitRequest{User: "alice", Key: fmt.Sprintf("doc-%d", time.Now().UnixNano()),
		Payload: payload, CostBudget: 10, StepsMax: 5, Priority: priority})
	require.NoError(a.t, err)
	return res.TaskID
}

func (a *apiDoc) claim(id string) model.Claim {
	a.t.Helper()
	cs, err := a.prep.Claim(context.Background(), model.ClaimRequest{Worker: "doc-worker", Max: 1, Lease: time.Minute})
	require.NoError(a.t, err)
	require.Len(a.t, cs, 1)
	require.Equal(a.t, id, cs[0].Claim.TaskID)
	return cs[0].Claim
}

// atGate returns a task waiting for approval at version 3, as the
// approve and reject examples name: claimed and released twice, then
// claimed and paused at its gate.
func (a *apiDoc) atGate() string {
	a.t.Helper()
	ctx := context.Background()
	id := a.submit(docGatePayload, model.PriorityMax)
	for range 2 {
		_, err := a.prep.Release(ctx, a.claim(id))
		require.NoError(a.t, err)
	}
	to, err := a.prep.Pause(ctx, a.claim(id), 0, "manager")
	require.NoError(a.t, err)
	require.Equal(a.t, model.WaitingForApproval, to)
	task, err := a.prep.Task(ctx, id)
	require.NoError(a.t, err)
	require.EqualValues(a.t, 3, task.ApprovalVersion)
	return id
}

// inReview returns a task in needs_review whose step 1's effect has an
// intent and no receipt, as the requeue, resolve and settle examples need.
func (a *apiDoc) inReview() string {
	a.t.Helper()
	ctx := context.Background()
	id := a.submit(docEffectPayload, model.PriorityMax)
	c := a.claim(id)
	_, err := a.prep.CompleteStep(ctx, model.StepWrite{Claim: c, Index: 0, Cost: 1})
	require.NoError(a.t, err)
	intent, err := a.prep.RecordIntent(ctx, c, 1)
	require.NoError(a.t, err)
	to, err := a.prep.Fail(ctx, c, model.Failure{Class: model.Uncertain, OpID: intent.OpID, Message: "lost response"})
	require.NoError(a.t, err)
	require.Equal(a.t, model.NeedsReview, to)
	return id
}

// prepare binds the placeholders of cmd to what it needs.
func (a *apiDoc) prepare(cmd string) {
	a.t.Helper()
	if !strings.Contains(cmd, "t_0123abcd") {
		return
	}
	var id string
	switch {
	case strings.Contains(cmd, "/approve"), strings.Contains(cmd, "/reject"):
		id = a.atGate()
	case strings.Contains(cmd, "/requeue"), strings.Contains(cmd, "/resolve"), strings.Contains(cmd, "/v1/effects/"):
		id = a.inReview()
	default: // a queued task of alice's: to read, wait on, cancel, follow
		id = a.submit(docGatePayload, 0)
	}
	a.shell.subs[1] = id
}

// TestDocExamplesRun runs every example of docs/API.md and README.md.
func TestDocExamplesRun(t *testing.T) {
	ctx := context.Background()
	api := markdownBlocks(t, "docs/API.md")
	readme := markdownBlocks(t, "README.md")

	// docs/API.md's server: its tokens file, a database made by migrate.
	shell := newDocShell(t)
	db := filepath.Join(shell.work, "api.db")
	a := &apiDoc{t: t, shell: shell, tokens: filepath.Join(shell.work, "tokens.txt")}
	for _, b := range api {
		if strings.HasPrefix(b.lines[0], "# NAME") {
			require.NoError(t, os.WriteFile(a.tokens, []byte(strings.Join(b.lines, "\n")+"\n"), 0o600))
		}
	}
	require.FileExists(t, a.tokens, "docs/API.md has the tokens file")
	r := shell.exec(docBlock{file: "test"}, "leasehold migrate --db "+db)
	require.Equal(t, 0, r.code, "%s", r)
	q, err := queue.Open(ctx, queue.Options{Path: db, Clock: clockwork.NewRealClock(), IDs: randomid.Source{}})
	require.NoError(t, err)
	t.Cleanup(func() { q.Close() })
	a.prep, err = queue.Open(ctx, queue.Options{Path: db, Clock: clockwork.NewRealClock(), IDs: randomid.Source{}})
	require.NoError(t, err)
	t.Cleanup(func() { a.prep.Close() })
	tokens, err := httpapi.LoadTokens(a.tokens, false)
	require.NoError(t, err)
	srv, err := newServer(httpapi.Options{Queue: q, Tokens: tokens, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	a.server = httptest.NewServer(a.wrap(srv.mux))
	t.Cleanup(a.server.Close)
	// Events enough that "--after 41" and "after_seq=7" are in the past
	// of a task submitted for their example.
	for i := range 45 {
		_, err := a.prep.Submit(ctx, model.SubmitRequest{User: "bob", Key: fmt.Sprintf("filler-%d", i), Payload: `{"steps":[]}`, CostBudget: 1, StepsMax: 1})
		require.NoError(t, err)
	}
	page, err := a.prep.ListPage(ctx, queue.PageFilter{Limit: 1})
	require.NoError(t, err)

	shell.env = append(shell.env, "LEASEHOLD_DB="+db, fmt.Sprintf("NEXT=%d", page.Next))
	shell.subs = []string{"t_0123abcd", "", "http://127.0.0.1:8080", a.server.URL}
	mark := 0
	shell.before = func(cmd string) {
		mark = a.mark()
		shell.subs[1] = "t_0123abcd"
		a.prepare(cmd)
		if strings.Contains(cmd, "s_0123abcd") {
			sch, err := a.prep.AddSchedule(ctx, model.ScheduleSpec{User: "alice", Payload: `{"steps":[]}`, CostBudget: 1, StepsMax: 1,
				Origin: time.Now().Add(time.Hour), Period: time.Hour}, "doc")
			require.NoError(t, err)
			shell.subs = append(shell.subs, "s_0123abcd", sch.ID)
		}
	}
	shell.after = func(cmd string) { // a watched task is cancelled: the watch ends
		_, err := a.prep.Cancel(ctx, shell.subs[1], "doc")
		require.NoError(t, err)
	}
	var stream string // the event stream a curl example printed
	for _, b := range api {
		switch {
		case b.isShell():
			shell.run(b, func(cmd string, r docResult) {
				if strings.HasPrefix(cmd, "curl") {
					if until(cmd) != "" {
						stream = r.stdout
					}
					require.Truef(t, r.code == 0 || until(cmd) != "", "%s: %s\n%s", b, cmd, r)
					answers := a.answers(mark)
					require.NotEmpty(t, answers, "%s: %s reached the server", b, cmd)
					for _, answer := range answers {
						require.Regexp(t, `^2\d\d `, answer, "%s: %s\n%s", b, cmd, r)
					}
					return
				}
				require.Equal(t, 0, r.code, "%s: %s\n%s", b, cmd, r)
			})
		case b.lang == "go": // TestDocGoBlocksCompile
		case strings.HasPrefix(b.lines[0], "# NAME"): // the tokens file, served above
		case strings.HasPrefix(b.lines[0], `{"error"`):
			a.checkErrorExample(b)
		case strings.HasPrefix(b.lines[0], "id: "):
			require.NotEmpty(t, stream, "%s: the event stream example follows its curl command", b)
			checkStreamExample(t, b, stream)
		default:
			t.Errorf("%s: a code block this test does not run or check:\n%s", b, strings.Join(b.lines, "\n"))
		}
	}

	// README's commands, in a directory of their own.
	rs := newDocShell(t)
	require.NoError(t, os.WriteFile(filepath.Join(rs.work, "tokens.txt"), []byte(readFile(t, a.tokens)), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(rs.work, "tasks.jsonl"), []byte(
		`{"user":"ana","key":"b1","payload":{"steps":[{"cost":1}]},"cost_budget":5,"steps_max":2}`+"\n"+
			`{"user":"bo","key":"b2","payload":{"steps":[{"cost":1}]},"cost_budget":5,"steps_max":2}`+"\n"), 0o600))
	rs.subs = []string{"TASK_ID", "TASK_ID", "127.0.0.1:8080", "127.0.0.1:0"}
	for _, b := range readme {
		switch {
		case b.isShell():
			rs.run(b, func(cmd string, r docResult) {
				if strings.HasPrefix(cmd, "make ") {
					return // run as make -n below
				}
				require.Equal(t, 0, r.code, "%s: %s\n%s", b, cmd, r)
				if strings.HasPrefix(cmd, "bin/leasehold submit") && !strings.Contains(cmd, "--batch") {
					require.Regexp(t, `^t_[0-9a-f]+\n$`, r.stdout)
					rs.subs[1] = strings.TrimSpace(r.stdout)
				}
			})
		case b.lang == "go": // TestDocGoBlocksCompile
		default:
			t.Errorf("%s: a code block this test does not run or check:\n%s", b, strings.Join(b.lines, "\n"))
		}
	}
	require.NotEqual(t, "TASK_ID", rs.subs[1], "README submits a task")
}

// TestConsoleDocExampleRuns runs docs/CONSOLE.md's commands: migrate
// makes the database, serve serves it with docs/API.md's tokens file (on
// a free port), and the console answers its sign-in page there before
// serve is stopped.
func TestConsoleDocExampleRuns(t *testing.T) {
	shell := newDocShell(t)
	for _, b := range markdownBlocks(t, "docs/API.md") {
		if strings.HasPrefix(b.lines[0], "# NAME") {
			require.NoError(t, os.WriteFile(filepath.Join(shell.work, "tokens.txt"), []byte(strings.Join(b.lines, "\n")+"\n"), 0o600))
		}
	}
	shell.subs = []string{"127.0.0.1:8080", "127.0.0.1:0"}
	signin := 0 // the sign-in pages the served console answered
	shell.running = func(cmd, output string) {
		addr := regexp.MustCompile(`"msg":"serving","addr":"([^"]+)"`).FindStringSubmatch(output)
		require.NotNil(t, addr, "%s: the serving line names its address:\n%s", cmd, output)
		res, err := http.Get("http://" + addr[1] + "/ui/signin")
		require.NoError(t, err)
		require.NoError(t, res.Body.Close())
		require.Equal(t, http.StatusOK, res.StatusCode)
		signin++
	}
	blocks := markdownBlocks(t, "docs/CONSOLE.md")
	require.NotEmpty(t, blocks)
	for _, b := range blocks {
		require.True(t, b.isShell(), "%s: a code block this test does not run:\n%s", b, strings.Join(b.lines, "\n"))
		shell.run(b, func(cmd string, r docResult) {
			require.Equal(t, 0, r.code, "%s: %s\n%s", b, cmd, r) // serve too: SIGTERM stops it gracefully
		})
	}
	require.Equal(t, 1, signin, "docs/CONSOLE.md serves the console")
}

// docGoCopies names, for each document, the Go files holding the
// compiled copies of its Go blocks, block by block in order (the last
// file holds the blocks past the list's end).
var docGoCopies = map[string][]string{
	"README.md":   {"queue/example_test.go", "worker/example_test.go"},
	"docs/API.md": {"client/example_test.go"},
}

// TestDocGoBlocksCompile: every Go block of README and docs/API.md is a
// copy of code in a test file of the package it uses (an example that
// runs, for the queue), which compiles.
func TestDocGoBlocksCompile(t *testing.T) {
	for doc, copyFiles := range docGoCopies {
		n := 0
		for _, b := range markdownBlocks(t, doc) {
			if b.lang != "go" {
				continue
			}
			doctest.RequireIn(t, b.lines, filepath.Join(repoRoot, copyFiles[min(n, len(copyFiles)-1)]))
			n++
		}
		require.GreaterOrEqual(t, n, len(copyFiles), "%s has a Go example for each of %v", doc, copyFiles)
	}
}

// TestDocMakeTargetsExist: README's make commands name targets the
// Makefile has (make -n expands them without running them).
func TestDocMakeTargetsExist(t *testing.T) {
	n := 0
	for _, b := range markdownBlocks(t, "README.md") {
		for _, cmd := range b.commands() {
			target, ok := strings.CutPrefix(cmd, "make ")
			if !ok || !b.isShell() {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			out, err := exec.Command("make", append([]string{"-n", "-C", repoRoot}, strings.Fields(target)...)...).CombinedOutput()
			require.NoError(t, err, "%s: make -n %s:\n%s", b, target, out)
			n++
		}
	}
	require.Positive(t, n)
}

// pgSkipped is the line make test ends with when the PostgreSQL suites
// did not run.
const pgSkipped = "make test: the PostgreSQL suites were skipped (LEASEHOLD_TEST_POSTGRES is not set): make test-postgres runs them"

// TestMakeTestSaysWhatItSkipped: make test times each phase, and without
// LEASEHOLD_TEST_POSTGRES ends saying the PostgreSQL suites were skipped
// and what runs them (they skipped silently); README says the same. The
// recipe runs with GO a script that records its arguments, so no test
// runs twice.
func TestMakeTestSaysWhatItSkipped(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "go")
	log := filepath.Join(dir, "calls")
	require.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\necho \"$*\" >> "+log+"\n"), 0o755))
	run := func(pg string) []string {
		t.Helper()
		cmd := exec.Command("make", "-s", "-C", repoRoot, "test", "GO="+fake)
		cmd.Env = append(os.Environ(), "LEASEHOLD_TEST_POSTGRES="+pg, "MAKEFLAGS=")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	lines := run("")
	require.Equal(t, pgSkipped, lines[len(lines)-1])
	phases := 0
	for _, line := range lines {
		if regexp.MustCompile(`^make test: [^:]+: \d+s$`).MatchString(line) {
			phases++
		}
	}
	calls := strings.Split(strings.TrimSpace(readFile(t, log)), "\n")
	require.Equal(t, len(calls), phases, "a time for each phase:\n%s", strings.Join(lines, "\n"))
	require.GreaterOrEqual(t, phases, 8)
	require.Regexp(t, `^make test: passed in \d+s$`, lines[len(lines)-2])

	lines = run("postgres://postgres@127.0.0.1:5432/postgres")
	require.NotContains(t, strings.Join(lines, "\n"), "skipped")

	readme := readFile(t, filepath.Join(repoRoot, "README.md"))
	for _, want := range []string{"LEASEHOLD_TEST_POSTGRES", "make test-postgres", "skipped", "each phase's time"} {
		require.Contains(t, readme, want)
	}
}

// checkErrorExample checks docs/API.md's error body against the server's
// answer to the same mistake: a submit with cost_budget 0.
func (a *apiDoc) checkErrorExample(b docBlock) {
	a.t.Helper()
	var want map[string]any
	require.NoError(a.t, json.Unmarshal([]byte(strings.Join(b.lines, "\n")), &want), "%s", b)
	req, err := http.NewRequest(http.MethodPost, a.server.URL+"/v1/tasks", strings.NewReader(
		`{"user":"alice","key":"k-bad","payload":{"steps":[]},"cost_budget":0,"steps_max":1}`))
	require.NoError(a.t, err)
	req.Header.Set("Authorization", "Bearer s3cret-of-at-least-16-chars")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(a.t, err)
	defer resp.Body.Close()
	require.Equal(a.t, http.StatusBadRequest, resp.StatusCode)
	var got map[string]any
	require.NoError(a.t, json.NewDecoder(resp.Body).Decode(&got))
	require.Equal(a.t, want, got, "%s: the error example is what the server answers", b)
}

// streamLine matches a line of an event stream: a field and its value.
var streamLine = regexp.MustCompile(`^(id|event|data): `)

// checkStreamExample checks that each field the example's stream shows
// is one the real stream has, with its first value's shape.
func checkStreamExample(t *testing.T, b docBlock, stream string) {
	t.Helper()
	real := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(stream))
	for sc.Scan() {
		if m := streamLine.FindString(sc.Text()); m != "" {
			if _, ok := real[m]; !ok {
				real[m] = sc.Text()
			}
		}
	}
	for _, line := range b.lines {
		m := streamLine.FindString(line)
		if m == "" {
			continue
		}
		got, ok := real[m]
		require.True(t, ok, "%s: the stream has no %q line:\n%s", b, m, stream)
		switch m {
		case "event: ":
			require.Equal(t, line, got)
		case "data: ":
			require.True(t, strings.HasPrefix(got, `data: {"seq":`), "%s: %s", b, got)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// TestScheduleAddHelpSaysWhatIsRequired: schedule add's help marks the
// flags a schedule cannot go without, --origin among them (a schedule
// without one is refused: "origin: required").
func TestScheduleAddHelpSaysWhatIsRequired(t *testing.T) {
	r := lh(t, "schedule", "add", "--help")
	requireOK(t, r)
	for _, name := range []string{"user", "payload", "cost-budget", "steps-max", "origin", "period"} {
		require.Regexp(t, `(?m)^  -`+name+` .*\n\s+.*; required`, r.stdout, "--%s is marked required", name)
	}
	require.NotRegexp(t, `(?m)^  -priority .*\n\s+.*required`, r.stdout)
}

// Command leasehold is the one binary of leasehold: callers, approvers and
// operators use it against the queue's database, workers run under it, and
// the simulator and the demo start from it.
//
// Exit codes: 0 success, 1 a failed operation or check, 2 bad usage or
// input (with one line naming what was wrong).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/leasehold/leasehold/model"
)

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// env is what a command runs with.
type env struct {
	ctx    context.Context
	stdout io.Writer
	stderr io.Writer
}

// command is one subcommand.
type command struct {
	summary string
	run     func(e *env, args []string) int
}

var commands = map[string]command{}

func register(name, summary string, run func(e *env, args []string) int) {
	commands[name] = command{summary: summary, run: run}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(&env{ctx: ctx, stdout: os.Stdout, stderr: os.Stderr}, os.Args[1:]))
}

func run(e *env, args []string) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(e.stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(e.stderr, "leasehold: unknown command %q (run leasehold help)\n", args[0])
		return exitUsage
	}
	if scope := commandScopes[args[0]]; scope != "" {
		scoped := *e
		scoped.ctx = model.WithScope(e.ctx, scope)
		e = &scoped
	}
	return cmd.run(e, args[1:])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: leasehold COMMAND [flags]")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
}

// commandScopes is the scope each acting command's actions are recorded
// under in the audit trail: what a token would need for the same action
// over HTTP.
var commandScopes = map[string]string{
	"submit": model.ScopeSubmit, "cancel": model.ScopeSubmit,
	"approve": model.ScopeApprove, "reject": model.ScopeApprove,
	"requeue": model.ScopeOperate, "resolve": model.ScopeOperate, "settle": model.ScopeOperate,
	"limits": model.ScopeOperate, "schedule": model.ScopeOperate, "reap": model.ScopeOperate,
	"restore": model.ScopeOperate, "migrate": model.ScopeOperate, "snapshot": model.ScopeOperate,
}

// usageError is bad usage or input: exit 2 with one line.
type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

func badUsage(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// parse parses flags (no positional arguments), turning flag errors into
// one-line usage errors.
func parse(fs *flag.FlagSet, args []string) error { return parseWithArgs(fs, args, 0) }

// parseWithArgs parses flags and exactly n positional arguments, which may
// come before or after the flags. A positional argument is never read as a
// flag: after "--" everything is positional, and the positional arguments
// are handed back to fs behind a "--" so that fs.Args() holds them as given.
func parseWithArgs(fs *flag.FlagSet, args []string, n int) error {
	fs.SetOutput(io.Discard)
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return helpRequested{helpText(fs)}
			}
			return usageError{strings.TrimSpace(err.Error())}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if endedByTerminator(fs, args[:len(args)-len(rest)]) {
			positional = append(positional, rest...)
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	if len(positional) != n {
		if n == 0 {
			return badUsage("unexpected argument %q", positional[0])
		}
		return badUsage("expected %d argument(s), got %d", n, len(positional))
	}
	// Parsing "--" and the arguments sets no flag and leaves fs.Args()
	// holding exactly the positional arguments.
	return fs.Parse(append([]string{"--"}, positional...))
}

// endedByTerminator reports whether fs stopped parsing at a "--" rather
// than at a positional argument. consumed is what fs parsed: flags, their
// values, and at most one "--", which can only be the last (a "--" that is
// a flag's value does not count).
func endedByTerminator(fs *flag.FlagSet, consumed []string) bool {
	for i := 0; i < len(consumed); i++ {
		s := consumed[i]
		if s == "--" {
			return i == len(consumed)-1
		}
		name := strings.TrimPrefix(strings.TrimPrefix(s, "-"), "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := fs.Lookup(name); f != nil {
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
				continue
			}
			i++ // the flag's value
		}
	}
	return false
}

// helpRequested carries a command's help, asked for with -h or --help: it
// goes to stdout and the command exits 0 without doing anything.
type helpRequested struct{ text string }

func (h helpRequested) Error() string { return h.text }

// helpText is the command's summary and every flag with its default.
func helpText(fs *flag.FlagSet) string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: leasehold %s [flags]\n", fs.Name())
	if c, ok := commands[fs.Name()]; ok && c.summary != "" {
		fmt.Fprintf(&b, "\n%s\n", c.summary)
	}
	b.WriteString("\nflags:\n")
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	return b.String()
}

// fail prints err on one line and returns its exit code: 2 for bad usage
// or input, 1 otherwise.
func fail(e *env, name string, err error) int {
	var help helpRequested
	if errors.As(err, &help) {
		fmt.Fprint(e.stdout, help.text)
		return exitOK
	}
	fmt.Fprintf(e.stderr, "leasehold %s: %s\n", name, oneLine(err.Error()))
	var u usageError
	if errors.As(err, &u) || isInvalidInput(err) {
		return exitUsage
	}
	return exitFail
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

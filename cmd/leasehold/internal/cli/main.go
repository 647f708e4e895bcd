// Package cli is leasehold's command line: the commands, their flags,
// help and exit codes (0 success, 1 a failed operation or check, 2 bad
// usage or input, with one line naming what was wrong). Callers,
// approvers and operators use it against the queue's database; workers,
// the HTTP server, the simulator, the demo and the evidence report start
// from it.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

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

// Run runs the command line args (without the program's name) under ctx,
// writing to stdout and stderr, and returns the exit code.
func Run(ctx context.Context, stdout, stderr io.Writer, args []string) int {
	return run(&env{ctx: ctx, stdout: stdout, stderr: stderr}, args)
}

func run(e *env, args []string) int {
	if len(args) == 2 && args[0] == "help" {
		// help COMMAND is COMMAND --help (help schedule add: schedule add --help).
		args = []string{args[1], "--help"}
	} else if len(args) > 2 && args[0] == "help" {
		args = append(args[1:], "--help")
	}
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
	fmt.Fprintln(w, "usage: leasehold COMMAND [flags]   (leasehold help COMMAND, or COMMAND --help, lists its flags)")
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

// optionalArg, as parseWithArgs's n, takes zero or one positional
// argument (events [TASK] --follow).
const optionalArg = -1

// parseWithArgs parses flags and exactly n positional arguments, which may
// come before or after the flags. A positional argument is never read as a
// flag: after "--" everything is positional, and the positional arguments
// are handed back to fs behind a "--" so that fs.Args() holds them as given.
//
// n == optionalArg takes zero or one positional argument.
func parseWithArgs(fs *flag.FlagSet, args []string, n int) error {
	fs.SetOutput(io.Discard)
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return helpRequested{helpText(fs)}
			}
			return flagError(fs, err)
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
	if len(positional) != n && !(n == optionalArg && len(positional) <= 1) {
		if n == 0 {
			return badUsage("unexpected argument %s (leasehold %s takes flags only)", model.Quote(positional[0], 64), fs.Name())
		}
		name := positionals[fs.Name()]
		if name == "" {
			name = "ARGUMENT"
		}
		if len(positional) == 0 {
			return badUsage("%s argument required (usage: leasehold %s %s [flags])", name, fs.Name(), name)
		}
		return badUsage("one %s argument expected, got %d (usage: leasehold %s %s [flags])", name, len(positional), fs.Name(), name)
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

// positionals names the positional argument of each command that takes
// one, as its usage and its errors show it.
var positionals = map[string]string{
	"status": "TASK", "cancel": "TASK", "events": "TASK", "approve": "TASK", "reject": "TASK",
	"requeue": "TASK", "resolve": "TASK", "settle": "OP", "schedule remove": "SCHEDULE",
	"snapshot verify": "SNAPSHOT", "restore": "SNAPSHOT",
}

// subcommand is one word of a command that takes several (schedule,
// snapshot).
type subcommand struct{ name, summary string }

// subcommands are the words of the commands that take several.
var subcommands = map[string][]subcommand{
	"schedule": {
		{"add", "add a schedule: --user U --payload JSON --cost-budget N --steps-max N --origin T --period D; run k is due at origin + k*period"},
		{"list", "list the schedules"},
		{"run", "enqueue the runs due now (workers do this on their own)"},
		{"remove", "remove a schedule: schedule remove SCHEDULE"},
	},
	"snapshot": {
		{"create", "write a consistent copy of a live database: snapshot create --out FILE"},
		{"verify", "check a snapshot against its manifest: snapshot verify SNAPSHOT"},
	},
}

// dataDirNote states the restriction on the paths of the release
// commands.
const dataDirNote = "Every path it reads or writes (the database, the snapshot, --out, --to, --snapshot-dir) must lie\n" +
	"inside the allowed data directory: $LEASEHOLD_DATA_DIR, or the working directory when it is not set.\n" +
	"Symbolic links and paths with ? or # are refused."

// helpNotes are what a command's help says of its restrictions.
var helpNotes = map[string]string{
	"snapshot create": dataDirNote, "snapshot verify": dataDirNote, "restore": dataDirNote, "migrate": dataDirNote,
}

// summaryOf is a command's or subcommand's one-line summary.
func summaryOf(name string) string {
	if c, ok := commands[name]; ok {
		return c.summary
	}
	parent, word, _ := strings.Cut(name, " ")
	for _, sub := range subcommands[parent] {
		if sub.name == word {
			return sub.summary
		}
	}
	return ""
}

// subcommandHelp is the help of a command that takes a subcommand.
func subcommandHelp(name string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: leasehold %s SUBCOMMAND [flags]\n\n%s\n\nsubcommands:\n", name, commands[name].summary)
	for _, sub := range subcommands[name] {
		fmt.Fprintf(&b, "  %-8s %s\n", sub.name, sub.summary)
	}
	fmt.Fprintf(&b, "\nleasehold %s SUBCOMMAND --help lists its flags.\n", name)
	return b.String()
}

// dispatch splits a command that takes a subcommand into the subcommand
// and its arguments. Asking for help (no subcommand words needed) returns
// helpRequested.
func dispatch(name string, args []string) (string, []string, error) {
	if len(args) == 0 {
		var words []string
		for _, sub := range subcommands[name] {
			words = append(words, sub.name)
		}
		last := len(words) - 1
		return "", nil, badUsage("say %s or %s (leasehold %s --help)", strings.Join(words[:last], ", "), words[last], name)
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		return "", nil, helpRequested{subcommandHelp(name)}
	}
	return args[0], args[1:], nil
}

// helpText is the command's summary, what restricts it, and every flag
// with its default.
func helpText(fs *flag.FlagSet) string {
	var b strings.Builder
	usage := fs.Name()
	if p := positionals[fs.Name()]; p != "" {
		usage += " " + p
	}
	fmt.Fprintf(&b, "usage: leasehold %s [flags]\n", usage)
	if summary := summaryOf(fs.Name()); summary != "" {
		fmt.Fprintf(&b, "\n%s\n", summary)
	}
	if note := helpNotes[fs.Name()]; note != "" {
		fmt.Fprintf(&b, "\n%s\n", note)
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

// invalidFlagValue matches the flag package's refusal of a value, for
// flagError to word it.
var invalidFlagValue = regexp.MustCompile(`^invalid (?:boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-([^:]+): (.*)$`)

// flagError words a flag package error as the binary's others are: the
// flag named with its two dashes, the rule stated, the value quoted with
// its characters kept.
func flagError(fs *flag.FlagSet, err error) error {
	msg := strings.TrimSpace(err.Error())
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		return badUsage("unknown flag --%s (leasehold %s --help lists the flags)", strings.TrimLeft(name, "-"), fs.Name())
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		return badUsage("--%s: needs a value", strings.TrimLeft(name, "-"))
	}
	m := invalidFlagValue.FindStringSubmatch(msg)
	if m == nil {
		return usageError{msg}
	}
	value, name, reason := m[1], m[2], m[3]
	if unquoted, err := strconv.Unquote(value); err == nil {
		value = model.Quote(unquoted, 64)
	}
	var want string
	if f := fs.Lookup(name); f != nil {
		if g, ok := f.Value.(flag.Getter); ok {
			switch g.Get().(type) {
			case int, int64, uint, uint64:
				want = "must be a whole number"
				if strings.Contains(reason, "out of range") {
					want = "must be a whole number that fits in 64 bits (see --help for its range)"
				}
			case time.Duration:
				want = "must be a duration such as 500ms, 30s or 5m"
			case bool:
				want = "must be true or false"
			}
		}
	}
	if want == "" {
		want = "invalid value"
	}
	return badUsage("--%s: %s, got %s", name, want, value)
}

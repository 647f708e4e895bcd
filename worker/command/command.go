package command

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/kinds"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/worker"
)

// Exit statuses with a meaning of their own.
const (
	ExitTransient  = 75 // EX_TEMPFAIL: a transient failure
	ExitNotApplied = 1  // of a reconcile command: the operation was not applied
)

// Bounds of a run's output.
const (
	StderrLineMax  = 1024 // bytes of one logged stderr line
	StderrLinesMax = 200  // stderr lines logged per run
	// ReconcileTimeoutDefault bounds a reconcile command when Config sets
	// no ReconcileTimeout.
	ReconcileTimeoutDefault = 30 * time.Second
	// waitDelay bounds how long a run's output is read once its process
	// has exited (a process left in the group holding stdout open is
	// killed, and its output is not waited for).
	waitDelay = time.Second
)

// Config configures a Handler. Kind, Command, Service, Grace and Clock
// are required; a Queryable or Fenced service needs Reconcile.
type Config struct {
	Kind    string   // the kind's name, LEASEHOLD_KIND
	Command []string // the program and its arguments
	Dir     string   // working directory; empty: the worker's
	// Service is what the command's side effects allow: worker.Dedup,
	// worker.Queryable or worker.Fenced (with Reconcile), or worker.Plain.
	Service   worker.ServiceKind
	Reconcile []string
	// Grace is how long a cancelled command has between SIGTERM and
	// SIGKILL.
	Grace time.Duration
	// Timeout bounds one run (worker.StepSpec.Timeout); zero takes the
	// worker's Config.StepTimeout.
	Timeout time.Duration
	// ReconcileTimeout bounds one reconcile command; zero takes
	// ReconcileTimeoutDefault.
	ReconcileTimeout time.Duration
	// Env is the environment the commands start from; nil takes the
	// worker's own (os.Environ). Its LEASEHOLD_ variables are dropped
	// either way: they are the worker's settings, not the command's.
	Env    []string
	Clock  clockwork.Clock
	Logger *slog.Logger // stderr and signals are logged here; nil: discard
}

// Handler runs a kind's command once per task (see the package doc).
type Handler struct {
	cfg Config

	mu       sync.Mutex
	inFlight int           // processes started and not yet waited for
	idle     chan struct{} // closed when inFlight drops to zero; nil while it is
}

var _ worker.Handler = (*Handler)(nil)

// New returns the handler cfg describes.
func New(cfg Config) (*Handler, error) {
	if err := kinds.CheckName(cfg.Kind); err != nil {
		return nil, fmt.Errorf("command handler: kind: %w", err)
	}
	if len(cfg.Command) == 0 || cfg.Command[0] == "" {
		return nil, fmt.Errorf("command handler %s: Command is required", cfg.Kind)
	}
	switch cfg.Service {
	case worker.Dedup, worker.Plain:
	case worker.Queryable, worker.Fenced:
		if len(cfg.Reconcile) == 0 || cfg.Reconcile[0] == "" {
			return nil, fmt.Errorf("command handler %s: a %s command needs Reconcile", cfg.Kind, cfg.Service)
		}
	default:
		return nil, fmt.Errorf("command handler %s: Service must be dedup, queryable, fenced or plain, got %q", cfg.Kind, cfg.Service)
	}
	if cfg.Grace <= 0 || cfg.Clock == nil {
		return nil, fmt.Errorf("command handler %s: a positive Grace and a Clock are required", cfg.Kind)
	}
	if cfg.Timeout < 0 || cfg.ReconcileTimeout < 0 {
		return nil, fmt.Errorf("command handler %s: timeouts must not be negative", cfg.Kind)
	}
	if cfg.ReconcileTimeout == 0 {
		cfg.ReconcileTimeout = ReconcileTimeoutDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Env == nil {
		cfg.Env = os.Environ()
	}
	cfg.Env = withoutOwn(cfg.Env)
	cfg.Command, cfg.Reconcile = append([]string(nil), cfg.Command...), append([]string(nil), cfg.Reconcile...)
	return &Handler{cfg: cfg}, nil
}

// FromKind returns the handler of a kinds file's kind, which must have a
// worker member.
func FromKind(k *kinds.Kind, clock clockwork.Clock, logger *slog.Logger) (*Handler, error) {
	if k.Worker == nil {
		return nil, fmt.Errorf("kind %s has no worker member: no command to run", k.Name)
	}
	svc := worker.Plain
	switch k.Worker.Service {
	case kinds.ServiceDedup:
		svc = worker.Dedup
	case kinds.ServiceQueryable:
		svc = worker.Queryable
	case kinds.ServiceFenced:
		svc = worker.Fenced
	}
	return New(Config{Kind: k.Name, Command: k.Worker.Command, Dir: k.Worker.Dir, Service: svc,
		Reconcile: k.Worker.Reconcile, Grace: k.Worker.Grace, Timeout: k.Defaults.Timeout, Clock: clock, Logger: logger})
}

// Kind returns the kind the handler runs.
func (h *Handler) Kind() string { return h.cfg.Kind }

// Plan returns the task's one step: a run of the command that makes its
// effect under the ledger.
func (h *Handler) Plan(model.Task) ([]worker.StepSpec, error) {
	l := &worker.RunLedger{Kind: h.cfg.Service}
	if h.cfg.Service.CanAnswer() {
		l.Status = h.reconcile
	}
	return []worker.StepSpec{{Effect: h.cfg.Kind, Timeout: h.cfg.Timeout, Ledger: l}}, nil
}

// Run runs the command once for step index of task. Its checkpoint is
// the command's last non-empty stdout line.
func (h *Handler) Run(ctx context.Context, task model.Task, index int, _ worker.StepSpec) (string, error) {
	op := model.OperationID(task.ID, index)
	env := slices.Concat(h.cfg.Env, []string{
		"LEASEHOLD_TASK_ID=" + task.ID,
		"LEASEHOLD_ATTEMPT=" + strconv.Itoa(task.Attempt),
		"LEASEHOLD_FENCE=" + strconv.FormatInt(task.Version, 10),
		"LEASEHOLD_OPERATION_ID=" + op,
		"LEASEHOLD_KIND=" + h.cfg.Kind,
		"LEASEHOLD_STEP=" + strconv.Itoa(index)})
	log := h.cfg.Logger.With("kind", h.cfg.Kind, "task_id", task.ID, "attempt", task.Attempt, "op_id", op)
	out, err := h.run(ctx, h.cfg.Command, env, task.Payload, h.cfg.Grace, log)
	if err != nil {
		return "", err
	}
	switch {
	case !out.signaled && out.exit == 0:
		return out.last, nil // even if stopped meanwhile: it did its work
	case out.killedBy != nil:
		return "", fmt.Errorf("command %s stopped: %w", h.cfg.Kind, out.killedBy)
	case out.signaled:
		return "", fmt.Errorf("%w: command %s killed by signal %s", worker.ErrTransient, h.cfg.Kind, out.signal)
	case out.exit == ExitTransient:
		return "", fmt.Errorf("%w: command %s exited %d", worker.ErrTransient, h.cfg.Kind, out.exit)
	}
	return "", fmt.Errorf("%w: command %s exited %d", worker.ErrPermanent, h.cfg.Kind, out.exit)
}

// reconcile runs the reconcile command for opID: exit 0 applied (its last
// stdout line the result), ExitNotApplied not applied, anything else an
// error (the worker asks again later).
func (h *Handler) reconcile(ctx context.Context, opID string, fence int64) (bool, string, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := h.cfg.Clock.AfterFunc(h.cfg.ReconcileTimeout, func() {
		cancel(fmt.Errorf("reconcile command timed out after %s", h.cfg.ReconcileTimeout))
	})
	defer timer.Stop()
	env := slices.Concat(h.cfg.Env, []string{
		"LEASEHOLD_OPERATION_ID=" + opID,
		"LEASEHOLD_FENCE=" + strconv.FormatInt(fence, 10),
		"LEASEHOLD_KIND=" + h.cfg.Kind})
	log := h.cfg.Logger.With("kind", h.cfg.Kind, "op_id", opID, "reconcile", true)
	out, err := h.run(ctx, h.cfg.Reconcile, env, "", 0, log)
	switch {
	case err != nil:
		return false, "", err
	case !out.signaled && out.exit == 0:
		return true, out.last, nil
	case !out.signaled && out.exit == ExitNotApplied:
		return false, "", nil
	case out.killedBy != nil:
		return false, "", fmt.Errorf("reconcile command of %s stopped: %w", h.cfg.Kind, out.killedBy)
	case out.signaled:
		return false, "", fmt.Errorf("reconcile command of %s killed by signal %s", h.cfg.Kind, out.signal)
	}
	return false, "", fmt.Errorf("reconcile command of %s exited %d: it cannot say", h.cfg.Kind, out.exit)
}

// outcome is how one process ended.
type outcome struct {
	exit     int
	signaled bool
	signal   syscall.Signal
	killedBy error // the context's cause when the worker signalled it
	last     string
}

// run starts argv in a process group of its own with stdin and env, and
// waits for it. Once ctx is done it sends SIGTERM to the group and, grace
// later (at once when grace is zero), SIGKILL. Whatever is left of the
// group when the process has exited is killed. An error means the process
// did not start.
func (h *Handler) run(ctx context.Context, argv, env []string, stdin string, grace time.Duration, log *slog.Logger) (outcome, error) {
	stdout := newLastLine()
	stderr := newLogLines(log)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = h.cfg.Dir, env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = waitDelay
	h.started() // before the process can show it runs
	defer h.ended()
	if err := cmd.Start(); err != nil {
		return outcome{}, fmt.Errorf("%w: command %s did not start: %v", worker.ErrPermanent, h.cfg.Kind, err)
	}
	group := cmd.Process.Pid // the group's ID: the process leads it
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	began := h.cfg.Clock.Now()
	var out outcome
	var err error
	select {
	case err = <-exited:
	case <-ctx.Done():
		out.killedBy = context.Cause(ctx)
		err = h.stop(group, exited, grace, out.killedBy, log)
	}
	_ = syscall.Kill(-group, syscall.SIGKILL) // what the process left behind in its group
	stderr.close()
	out.last = stdout.result()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			out.signaled, out.signal = true, ws.Signal()
		} else {
			out.exit = exit.ExitCode()
		}
	case errors.Is(err, exec.ErrWaitDelay):
		// It exited; only its output outlived it.
	default:
		return outcome{}, fmt.Errorf("command %s: %w", h.cfg.Kind, err)
	}
	log.Info("command exited", "exit", out.exit, "signal", signalName(out), "ran_ms", h.cfg.Clock.Since(began).Milliseconds())
	return out, nil
}

// stop sends SIGTERM to the group, then SIGKILL once grace has passed
// with the process still there, and returns how the process ended.
func (h *Handler) stop(group int, exited <-chan error, grace time.Duration, cause error, log *slog.Logger) error {
	if grace > 0 {
		log.Info("command signalled", "signal", "SIGTERM", "cause", cause.Error(), "grace_ms", grace.Milliseconds())
		_ = syscall.Kill(-group, syscall.SIGTERM)
		timer := h.cfg.Clock.NewTimer(grace)
		defer timer.Stop()
		select {
		case err := <-exited:
			return err
		case <-timer.Chan():
		}
	}
	log.Warn("command signalled", "signal", "SIGKILL", "cause", cause.Error())
	_ = syscall.Kill(-group, syscall.SIGKILL)
	return <-exited
}

func signalName(out outcome) string {
	if !out.signaled {
		return ""
	}
	return out.signal.String()
}

func (h *Handler) started() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.inFlight++
}

func (h *Handler) ended() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.inFlight--; h.inFlight == 0 && h.idle != nil {
		close(h.idle)
		h.idle = nil
	}
}

// Wait returns once no process of the handler is running, or when ctx is
// done (with its error). A worker that stops calls it after its Runner
// has returned: a run the shutdown grace cut short has had SIGTERM, and
// gets SIGKILL Grace later, so waiting up to Grace keeps a command from
// outliving its worker.
func (h *Handler) Wait(ctx context.Context) error {
	h.mu.Lock()
	if h.inFlight == 0 {
		h.mu.Unlock()
		return nil
	}
	if h.idle == nil {
		h.idle = make(chan struct{})
	}
	idle := h.idle
	h.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Grace returns the handler's SIGTERM-to-SIGKILL grace.
func (h *Handler) Grace() time.Duration { return h.cfg.Grace }

// withoutOwn drops the LEASEHOLD_ variables of env.
func withoutOwn(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, "LEASEHOLD_") {
			out = append(out, kv)
		}
	}
	return out
}

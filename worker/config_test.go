package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/worker"
	"github.com/leasehold/leasehold/worker/workertest"
)

func TestConfigRequiresItsParts(t *testing.T) {
	b := setup(t)
	full := worker.Config{ID: "w1", Queue: b.q, Handler: worker.Synthetic{}, Service: workertest.NewService(worker.Dedup, b.clock), Clock: b.clock}
	for _, tc := range []struct {
		name string
		edit func(*worker.Config)
	}{
		{"queue", func(c *worker.Config) { c.Queue = nil }},
		{"handler", func(c *worker.Config) { c.Handler = nil }},
		{"clock", func(c *worker.Config) { c.Clock = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := full
			tc.edit(&cfg)
			w, err := worker.New(cfg)
			require.Nil(t, w)
			require.ErrorContains(t, err, "Queue, Handler and Clock are required")
		})
	}
	w, err := worker.New(full)
	require.NoError(t, err)
	require.Equal(t, "w1", w.ID())
}

// A Service is required only by a handler that says its plans may declare
// ledgered effects (the synthetic handler does); a HandlerFunc, or a
// planned handler that says nothing, needs none, and neither does New nor
// NewRunner ask for one.
func TestServiceRequiredOnlyForLedgeredEffects(t *testing.T) {
	b := setup(t)
	cfg := worker.Config{ID: "w1", Queue: b.q, Handler: worker.Synthetic{}, Clock: b.clock}
	_, err := worker.New(cfg)
	require.EqualError(t, err, "worker: the handler (worker.Synthetic) may declare ledgered effects, so a Service is required to apply them")
	_, err = worker.NewRunner(cfg, worker.RunOptions{})
	require.EqualError(t, err, "worker: the handler (worker.Synthetic) may declare ledgered effects, so a Service is required to apply them")

	for _, h := range []worker.Handler{
		worker.HandlerFunc(func(context.Context, model.Task, string) (string, error) { return "", nil }),
		plannedHandler{},
	} {
		cfg.Handler = h
		_, err := worker.New(cfg)
		require.NoError(t, err, "%T", h)
		_, err = worker.NewRunner(cfg, worker.RunOptions{})
		require.NoError(t, err, "%T", h)
	}
}

// plannedHandler plans what its payload names: "effect" plans one step
// with a ledgered effect, anything else one plain step. It does not say
// whether it makes effects.
type plannedHandler struct{}

func (plannedHandler) Plan(task model.Task) ([]worker.StepSpec, error) {
	if task.Payload == `{"effect":true}` {
		return []worker.StepSpec{{Cost: 1, Effect: "charge"}}, nil
	}
	return []worker.StepSpec{{Cost: 1}}, nil
}

func (plannedHandler) Run(context.Context, model.Task, int, worker.StepSpec) (string, error) {
	return "", nil
}

// A planned step that declares a ledgered effect on a worker without a
// Service fails its task permanently before anything runs, naming the
// step but not the effect; a plain plan of the same handler completes.
func TestEffectWithoutAServiceFailsPermanently(t *testing.T) {
	b := setup(t)
	effect := b.submit(`{"effect":true}`, 10, 5)
	plain := b.submit(`{"plain":true}`, 10, 5)
	w, err := worker.New(worker.Config{ID: "w1", Queue: b.q, Handler: plannedHandler{}, Clock: b.clock, Concurrency: 2,
		Lease: testLease, Heartbeat: testHeartbeat})
	require.NoError(t, err)
	b.run(w, stepsMax)

	task := b.task(effect)
	require.Equal(t, model.Failed, task.State)
	require.Equal(t, model.PermanentError, task.Reason)
	require.Equal(t, "step 0 declares a ledgered effect, but worker w1 has no Service", task.LastError)
	require.Zero(t, task.StepsUsed)
	require.Empty(t, b.eventsOf(effect, model.EventEffectIntent))
	require.Equal(t, model.Completed, b.task(plain).State)
}

// requireField asserts err is a *model.ValidationError naming field.
func requireField(t *testing.T, err error, field string) {
	t.Helper()
	var ve *model.ValidationError
	require.True(t, errors.As(err, &ve), "want a ValidationError naming %q, got %v", field, err)
	require.Equal(t, field, ve.Field, "error: %v", err)
	require.ErrorIs(t, err, model.ErrInvalidInput)
}

func TestConfigValidation(t *testing.T) {
	b := setup(t)
	base := func() worker.Config {
		return worker.Config{ID: "w1", Queue: b.q, Handler: worker.Synthetic{}, Service: workertest.NewService(worker.Dedup, b.clock), Clock: b.clock}
	}
	for _, tc := range []struct {
		name  string
		edit  func(*worker.Config)
		field string // "" when the config is accepted
	}{
		{"empty id", func(c *worker.Config) { c.ID = "" }, "id"},
		{"id with a space", func(c *worker.Config) { c.ID = "worker one" }, "id"},
		{"concurrency 64", func(c *worker.Config) { c.Concurrency = worker.ConcurrencyMax }, ""},
		{"concurrency 65", func(c *worker.Config) { c.Concurrency = worker.ConcurrencyMax + 1 }, "concurrency"},
		{"concurrency -1", func(c *worker.Config) { c.Concurrency = -1 }, "concurrency"},
		{"lease below the minimum", func(c *worker.Config) { c.Lease = model.LeaseMin - time.Millisecond }, "lease"},
		{"lease above the maximum", func(c *worker.Config) { c.Lease = model.LeaseMax + time.Millisecond }, "lease"},
		{"lease not whole milliseconds", func(c *worker.Config) { c.Lease = 2*time.Second + time.Microsecond }, "lease"},
		{"lease at the minimum", func(c *worker.Config) { c.Lease = model.LeaseMin }, ""},
		{"heartbeat exactly half the lease", func(c *worker.Config) { c.Lease, c.Heartbeat = 2*time.Second, time.Second }, ""},
		{"heartbeat more than half the lease", func(c *worker.Config) { c.Lease, c.Heartbeat = 2*time.Second, time.Second+time.Millisecond }, "heartbeat"},
		{"heartbeat as long as the lease", func(c *worker.Config) { c.Lease, c.Heartbeat = 2*time.Second, 2*time.Second }, "heartbeat"},
		{"negative heartbeat", func(c *worker.Config) { c.Heartbeat = -time.Second }, "heartbeat"},
		{"heartbeat over half the default lease", func(c *worker.Config) { c.Heartbeat = 16 * time.Second }, "heartbeat"},
		{"negative cost capacity", func(c *worker.Config) { c.CostCapacity = -1 }, "cost_capacity"},
		{"negative claim batch", func(c *worker.Config) { c.ClaimBatch = -1 }, "claim_batch"},
		{"claim batch above the concurrency", func(c *worker.Config) { c.Concurrency, c.ClaimBatch = 2, 3 }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base()
			tc.edit(&cfg)
			w, err := worker.New(cfg)
			if tc.field == "" {
				require.NoError(t, err)
				require.NotNil(t, w)
				return
			}
			require.Nil(t, w)
			requireField(t, err, tc.field)
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	b := setup(t)
	w, err := worker.New(worker.Config{ID: "w1", Queue: b.q, Handler: worker.Synthetic{}, Service: workertest.NewService(worker.Dedup, b.clock), Clock: b.clock})
	require.NoError(t, err)
	cfg := w.Config()
	require.Equal(t, 1, cfg.Concurrency, "concurrency 0 means 1")
	require.Equal(t, 1, cfg.ClaimBatch, "the claim batch follows the concurrency")
	require.Equal(t, 30*time.Second, cfg.Lease)
	require.Equal(t, 10*time.Second, cfg.Heartbeat, "the heartbeat defaults to a third of the lease")
	require.Equal(t, 100*time.Millisecond, cfg.PollMin)
	require.Equal(t, 2*time.Second, cfg.PollMax)
	require.Equal(t, 100*time.Millisecond, cfg.StorageBackoffMin)
	require.Equal(t, 5*time.Second, cfg.StorageBackoffMax)
	require.NotNil(t, cfg.Logger)
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError} {
		require.False(t, cfg.Logger.Enabled(context.Background(), level),
			"the default logger discards without building records (level %v)", level)
	}

	w, err = worker.New(worker.Config{ID: "w2", Queue: b.q, Handler: worker.Synthetic{}, Service: workertest.NewService(worker.Dedup, b.clock),
		Clock: b.clock, Concurrency: 8, Lease: 3 * time.Second})
	require.NoError(t, err)
	require.Equal(t, 8, w.Config().ClaimBatch)
	require.Equal(t, time.Second, w.Config().Heartbeat)
	require.Len(t, w.Claims(), 0)
	require.False(t, w.Drained(), "a worker that was never shut down is not drained")
}

func TestParseServiceKind(t *testing.T) {
	for _, k := range worker.ServiceKinds() {
		got, err := worker.ParseServiceKind(string(k))
		require.NoError(t, err)
		require.Equal(t, k, got)
	}
	_, err := worker.ParseServiceKind("exactly-once")
	require.ErrorContains(t, err, `unknown service kind "exactly-once"`)
	require.True(t, worker.Fenced.CanAnswer())
	require.True(t, worker.Queryable.CanAnswer())
	require.False(t, worker.Dedup.CanAnswer())
	require.False(t, worker.Plain.CanAnswer())
}

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
		{"service", func(c *worker.Config) { c.Service = nil }},
		{"clock", func(c *worker.Config) { c.Clock = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := full
			tc.edit(&cfg)
			w, err := worker.New(cfg)
			require.Nil(t, w)
			require.ErrorContains(t, err, "Queue, Handler, Service and Clock are required")
		})
	}
	w, err := worker.New(full)
	require.NoError(t, err)
	require.Equal(t, "w1", w.ID())
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

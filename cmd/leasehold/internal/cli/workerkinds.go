package cli

import (
	"context"
	"log/slog"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/kinds"
	"github.com/leasehold/leasehold/worker"
	commandworker "github.com/leasehold/leasehold/worker/command"
)

// kindHandlers loads the kinds file at path and returns the registry of
// its kinds that have a worker member (a command handler each, with the
// kind's schema as its validator), and the longest lease the kinds name
// (zero when none does). A file that does not load, or names no kind a
// worker can run, is bad usage.
func kindHandlers(path string, clock clockwork.Clock, logger *slog.Logger) (worker.Kinds, time.Duration, error) {
	f, err := kinds.Load(path)
	if err != nil {
		return nil, 0, badUsage("--kinds: %v", err)
	}
	registry := worker.Kinds{}
	var lease time.Duration
	for _, name := range f.Names() {
		k, _ := f.Kind(name)
		if k.Worker == nil {
			continue
		}
		h, err := commandworker.FromKind(k, clock, logger)
		if err != nil {
			return nil, 0, badUsage("--kinds: %v", err)
		}
		registry[name] = worker.Kind{Handler: h, Validate: f.Validator(name)}
		lease = max(lease, k.Defaults.Lease)
	}
	if len(registry) == 0 {
		return nil, 0, badUsage("--kinds: no kind of %s has a worker member (a command to run)", path)
	}
	return registry, lease, nil
}

// awaitCommands waits, once the runner has returned, for the commands its
// shutdown cut short: each has had SIGTERM and gets SIGKILL after its
// kind's grace, so none outlives the worker. The wait is bounded by the
// longest grace and a second.
func awaitCommands(registry worker.Kinds, logger *slog.Logger) {
	var grace time.Duration
	for _, k := range registry {
		if c, ok := k.Handler.(*commandworker.Handler); ok {
			grace = max(grace, c.Grace())
		}
	}
	if grace == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace+time.Second)
	defer cancel()
	for _, name := range registry.Served() {
		if c, ok := registry[name].Handler.(*commandworker.Handler); ok {
			if err := c.Wait(ctx); err != nil {
				logger.Warn("a command of the kind still runs as the worker exits", "kind", name)
			}
		}
	}
}

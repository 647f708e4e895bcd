package liverun

import (
	"fmt"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/faults"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/worker"
)

// DuplicateEnv names the environment variable that makes a worker deliver
// every write of the kind it names twice. Only the live run sets it, for
// the worker it starts to tell the duplicate-completion story.
const DuplicateEnv = "LEASEHOLD_LIVERUN_DUPLICATE"

// WorkerQueue returns the queue a worker process should write through:
// inner itself, or, when getenv(DuplicateEnv) names a write kind, inner
// wrapped so that every write of that kind is delivered twice. An unknown
// kind is an error naming the variable.
func WorkerQueue(inner worker.Queue, getenv func(string) string) (worker.Queue, error) {
	name := getenv(DuplicateEnv)
	if name == "" {
		return inner, nil
	}
	write, ok := model.ParseWrite(name)
	if !ok || !slices.Contains(faults.Writes, write) {
		names := make([]string, len(faults.Writes))
		for i, w := range faults.Writes {
			names[i] = string(w)
		}
		return nil, fmt.Errorf("%s: unknown write %q (one of %s)", DuplicateEnv, name, strings.Join(names, ", "))
	}
	dup := faults.NewQueue(inner)
	dup.DuplicateEvery(write)
	return dup, nil
}

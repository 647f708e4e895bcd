package sim

// Shrunk is the shortest schedule found that still breaks the same thing.
type Shrunk struct {
	Keep   []int   // indices into the seed's generated schedule
	Events []Event // the events at those indices
	Result Result  // the run of the shrunk schedule
	// Stopped: stop ended the shrink before it had tried every removal;
	// Keep is the shortest schedule found by then.
	Stopped bool
}

// shrinkRunsMax bounds the runs a shrink may make.
const shrinkRunsMax = 4000

// Shrink removes events from a failing run's schedule, keeping a removal
// whenever the same invariant (or the same kind of failure) still breaks:
// first large chunks, then smaller ones, down to single events, until no
// single event can go. The fault mix stays the seed's. It shrinks the
// seed's generated schedule (or cfg.Keep's part of it); cfg.Events is not
// used, and the tries record no trace or timeline. Once stop (which may
// be nil) is closed, no further try starts.
func Shrink(cfg Config, failed Result, stop <-chan struct{}) Shrunk {
	want := failed.Broken()
	keep := make([]int, len(failed.Schedule))
	for i := range keep {
		if cfg.Keep != nil {
			keep[i] = cfg.Keep[i]
		} else {
			keep[i] = i
		}
	}
	mix := failed.Mix
	try := func(candidate []int) (Result, bool) {
		c := cfg
		c.Keep, c.Mix, c.Events = candidate, &mix, nil
		c.Trace, c.Timeline = false, false
		r := Run(c)
		return r, r.Broken() == want
	}
	best := failed
	runs := 0
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	for chunk := len(keep) / 2; chunk >= 1 && runs < shrinkRunsMax; {
		removed := false
		for start := 0; start < len(keep) && runs < shrinkRunsMax; {
			if stopped() {
				return Shrunk{Keep: keep, Events: best.Schedule, Result: best, Stopped: true}
			}
			end := min(start+chunk, len(keep))
			candidate := make([]int, 0, len(keep)-(end-start)) // never nil: nil would mean "every event"
			candidate = append(append(candidate, keep[:start]...), keep[end:]...)
			runs++
			if r, ok := try(candidate); ok {
				keep, best, removed = candidate, r, true
				continue
			}
			start = end
		}
		if !removed {
			chunk /= 2
		}
	}
	return Shrunk{Keep: keep, Events: best.Schedule, Result: best}
}

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/riverqueue/river"
)

// The River run loop the SQLite (riverQ) and the pgx (riverPG) peers
// share, generic over the driver's transaction type.

// riverWork starts c, which must have n jobs to do, waits for their
// completion events, stops it, and checks that completed (a count of the
// completed rows) says n; name prefixes its errors.
func riverWork[TTx any](ctx context.Context, name string, c *river.Client[TTx], n int,
	completed func(context.Context) (int, error)) (sample, error) {
	events, cancel := c.SubscribeConfig(&river.SubscribeConfig{ChanSize: n + 1,
		Kinds: []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed}})
	defer cancel()
	smp, err := measure(n, func() error {
		if err := c.Start(ctx); err != nil {
			return err
		}
		return awaitRiver(events, n)
	})
	if err := stopRiver(ctx, c, err); err != nil {
		return sample{}, err
	}
	done, err := completed(ctx)
	if err != nil {
		return sample{}, err
	}
	if done != n {
		return sample{}, fmt.Errorf("%s: %d jobs completed, want %d", name, done, n)
	}
	return smp, nil
}

// stopRiver stops c within a minute and returns err, or the stop's error
// when err is nil.
func stopRiver[TTx any](ctx context.Context, c *river.Client[TTx], err error) error {
	stopCtx, stopCancel := context.WithTimeout(ctx, time.Minute)
	defer stopCancel()
	if serr := c.Stop(stopCtx); err == nil {
		err = serr
	}
	return err
}

// riverIntake measures inserting n jobs through c, in one InsertMany
// (bulk) or one Insert each.
func riverIntake[TTx any](ctx context.Context, c *river.Client[TTx], n int, bulk bool) (sample, error) {
	return measure(n, func() error {
		if bulk {
			_, err := c.InsertMany(ctx, manyParams(n, 0))
			return err
		}
		for range n {
			if _, err := c.Insert(ctx, jobArgs{}, nil); err != nil {
				return err
			}
		}
		return nil
	})
}

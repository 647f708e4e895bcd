package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"maragu.dev/goqite"
)

// goqiteSchema is the table and index goqite v0.4.0 requires its users to
// create (its schema_sqlite.sql), with its update trigger.
const goqiteSchema = `
create table goqite (
  id text primary key default ('m_' || lower(hex(randomblob(16)))),
  created text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  updated text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  queue text not null,
  body blob not null,
  timeout text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  received integer not null default 0,
  priority integer not null default 0
) strict;
create trigger goqite_updated_timestamp after update on goqite begin
  update goqite set updated = strftime('%Y-%m-%dT%H:%M:%fZ') where id = old.id;
end;
create index goqite_queue_priority_created_idx on goqite (queue, priority desc, created);`

// goqiteConns is goqite's pool size, the same as leasehold's default.
const goqiteConns = 4

// goq is goqite v0.4.0 with consumers goroutines, each receiving a
// message, running its steps and deleting it (two transactions a message,
// as leasehold's claim and complete are two). It has no worker runtime of
// its own beyond jobs.Runner, which polls at a fixed interval; plain
// consumers give it its best figures.
type goq struct{ consumers int }

func (g goq) name() string { return fmt.Sprintf("%s(%d consumers)", goqitePrefix, g.consumers) }
func (goq) postgres() bool { return false }

func (goq) queue(db *sql.DB) *goqite.Queue {
	return goqite.New(goqite.NewOpts{DB: db, Name: "bench", Timeout: 30 * time.Second, MaxReceive: 3})
}

func (g goq) create(ctx context.Context, path, sync string) (*sql.DB, error) {
	db, err := openSQLite(path, sync, goqiteConns)
	if err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, goqiteSchema+progressDDL); err != nil {
		db.Close()
		return nil, fmt.Errorf("goqite: schema: %w", err)
	}
	return db, nil
}

func body(steps int) []byte {
	b, _ := json.Marshal(jobArgs{Steps: steps})
	return b
}

// sendAll sends n messages in one transaction.
func (g goq) sendAll(ctx context.Context, db *sql.DB, q *goqite.Queue, n, steps int) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for range n {
		if err := q.SendTx(ctx, tx, goqite.Message{Body: body(steps)}); err != nil {
			return err
		}
	}
	return tx.Commit()
}

func (g goq) seed(ctx context.Context, path string, n, steps int) error {
	db, err := g.create(ctx, path, "NORMAL")
	if err != nil {
		return err
	}
	defer db.Close()
	return g.sendAll(ctx, db, g.queue(db), n, steps)
}

// consume runs one message: its steps, then its deletion, each retried
// while the database is busy (counted in retried).
func consume(ctx context.Context, db *sql.DB, q *goqite.Queue, m *goqite.Message, retried *atomic.Int64) error {
	var args jobArgs
	if err := json.Unmarshal(m.Body, &args); err != nil {
		return err
	}
	if err := retryBusy(retried, func() error { return recordSteps(ctx, db, string(m.ID), args.Steps) }); err != nil {
		return err
	}
	return retryBusy(retried, func() error { return q.Delete(ctx, m.ID) })
}

// retryBusy runs fn again while it fails with SQLITE_BUSY (a busy
// timeout under contention), as a consumer would.
func retryBusy(retried *atomic.Int64, fn func() error) error {
	for {
		err := fn()
		if err == nil || !strings.Contains(err.Error(), "SQLITE_BUSY") {
			return err
		}
		retried.Add(1)
	}
}

func (g goq) work(ctx context.Context, path, mode string, workers, n, steps int) (sample, error) {
	db, err := openSQLite(path, mode, goqiteConns)
	if err != nil {
		return sample{}, err
	}
	defer db.Close()
	q := g.queue(db)
	var done, retried atomic.Int64
	smp, err := measure(n, func() error {
		var wg sync.WaitGroup
		errs := make(chan error, g.consumers)
		for range g.consumers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for done.Load() < int64(n) {
					var m *goqite.Message
					err := retryBusy(&retried, func() (err error) {
						m, err = q.Receive(ctx)
						return err
					})
					if err != nil {
						errs <- err
						return
					}
					if m == nil {
						// The rest are in other consumers' hands.
						time.Sleep(time.Millisecond)
						continue
					}
					if err := consume(ctx, db, q, m, &retried); err != nil {
						errs <- err
						return
					}
					done.Add(1)
				}
			}()
		}
		wg.Wait()
		close(errs)
		return <-errs
	})
	if err != nil {
		return sample{}, err
	}
	var left int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM goqite`).Scan(&left); err != nil {
		return sample{}, err
	}
	if left != 0 {
		return sample{}, fmt.Errorf("goqite: %d messages left", left)
	}
	smp.retried = int(retried.Load())
	return smp, nil
}

func (g goq) intake(ctx context.Context, path, sync string, n int, bulk bool) (sample, error) {
	db, err := g.create(ctx, path, sync)
	if err != nil {
		return sample{}, err
	}
	defer db.Close()
	q := g.queue(db)
	return measure(n, func() error {
		if bulk {
			return g.sendAll(ctx, db, q, n, 0)
		}
		for range n {
			if err := q.Send(ctx, goqite.Message{Body: body(0)}); err != nil {
				return err
			}
		}
		return nil
	})
}

// latency uses one consumer receiving every 10 ms (ReceiveAndWait).
func (g goq) latency(ctx context.Context, path, sync string, k int) ([]time.Duration, error) {
	db, err := g.create(ctx, path, sync)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	q := g.queue(db)
	cctx, cancel := context.WithCancel(ctx)
	completed := make(chan struct{})
	failed := make(chan error, 1)
	go func() {
		for {
			m, err := q.ReceiveAndWait(cctx, 10*time.Millisecond)
			if errors.Is(err, context.Canceled) {
				return
			}
			if err == nil {
				err = consume(ctx, db, q, m, new(atomic.Int64))
			}
			if err != nil {
				failed <- err
				return
			}
			completed <- struct{}{}
		}
	}()
	out, err := idleLatencies(k, func(int) error { return q.Send(ctx, goqite.Message{Body: body(0)}) }, completed)
	cancel()
	select {
	case ferr := <-failed:
		if err == nil {
			err = ferr
		}
	default:
	}
	return out, err
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// procsRun runs PostgreSQL cell c on s once, in c.procs child processes
// (see child.go) against one schema: work burns down c.procs × -jobs
// jobs, 10 workers in each process; intake has each process submit its
// own -jobs (bulk) or -one-jobs (one at a time, one caller a process).
// The run is timed from the children's go to the last job done; the
// server's CPU is that of the run's own backends (backendCPU).
func (b *bench) procsRun(ctx context.Context, c cell, s system) error {
	b.runs++
	u, drop, err := pgSchema(ctx, b.cfg.postgres, b.cfg.pgOwner, b.runs)
	if err != nil {
		return err
	}
	defer drop()
	per := b.cfg.jobs
	if c.kind == "intake" && !c.bulk {
		per = b.cfg.oneJobs
	}
	total := per * c.procs
	switch c.kind {
	case "work":
		if err := s.seed(ctx, u, total, c.steps); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
		if b.cfg.pgAnalyze {
			if err := pgAnalyze(ctx, u); err != nil {
				return err
			}
		}
	case "intake":
		if err := prepareIntake(ctx, s, u); err != nil {
			return err
		}
	}
	// The run's backends carry its schema's name as their
	// application_name, which is how backendCPU finds them.
	app := schemaOf(u)
	tagged, err := withParam(u, "application_name", app)
	if err != nil {
		return err
	}
	parts := make([]part, c.procs)
	for i := range parts {
		parts[i] = part{System: s.name(), Kind: c.kind, Bulk: c.bulk, URL: tagged, Workers: c.workers,
			Jobs: per, First: i * per, Index: i}
	}
	smp, ends, err := runChildren(ctx, b.cfg.postgres, parts, int64(total), app)
	if err != nil {
		return err
	}
	for _, e := range ends {
		smp.cpu += e.CPU
		smp.retried += int(e.Retried)
		smp.claimWrites += e.ClaimWrites
		smp.claimed += e.Claimed
		smp.groups += e.Groups
		smp.groupOps += e.GroupOps
		smp.fused += e.Fused
	}
	smp.sizes = formatSizes(sumSizes(ends))
	if err := checkPG(ctx, s, u, c, total); err != nil {
		return err
	}
	b.record(c.String(), s.name(), smp)
	return nil
}

// prepareIntake makes s's schema at u, empty, before the intake's
// processes start.
func prepareIntake(ctx context.Context, s system, u string) error {
	switch s := s.(type) {
	case leasehold:
		q, err := s.open(ctx, u, "", queue.MigrateAll)
		if err != nil {
			return err
		}
		defer q.Close()
		return s.setLimits(ctx, q)
	case riverPG:
		pool, err := s.open(ctx, u, true)
		if err != nil {
			return err
		}
		pool.Close()
		return nil
	}
	return fmt.Errorf("%s: not a PostgreSQL system", s.name())
}

// checkPG checks that the run left what it should: total jobs completed
// (work) or queued (intake).
func checkPG(ctx context.Context, s system, u string, c cell, total int) error {
	want := map[string]model.State{"work": model.Completed, "intake": model.Queued}[c.kind]
	switch s := s.(type) {
	case leasehold:
		q, err := s.open(ctx, u, "", queue.MigrateNew)
		if err != nil {
			return err
		}
		defer q.Close()
		m, err := q.Metrics(ctx)
		if err != nil {
			return err
		}
		if got := m.Depth[want]; got != int64(total) {
			return fmt.Errorf("%d tasks %s, want %d", got, want, total)
		}
		return nil
	case riverPG:
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			return fmt.Errorf("postgres: %s", queue.RedactURL(err.Error()))
		}
		defer conn.Close(context.Background())
		state := map[string]string{"work": "completed", "intake": "available"}[c.kind]
		var got int
		if err := conn.QueryRow(ctx, `SELECT COUNT(*) FROM river_job WHERE state = $1`, state).Scan(&got); err != nil {
			return err
		}
		if got != total {
			return fmt.Errorf("river-pgx: %d jobs %s, want %d", got, state, total)
		}
		return nil
	}
	return fmt.Errorf("%s: not a PostgreSQL system", s.name())
}

// withParam is u with its query parameter name set to value.
func withParam(u, name, value string) (string, error) {
	parsed, err := url.Parse(u)
	if err != nil {
		return "", errors.New("postgres: the run's URL does not parse")
	}
	v := parsed.Query()
	v.Set(name, value)
	parsed.RawQuery = v.Encode()
	return parsed.String(), nil
}

func sumSizes(ends []childEnd) []int64 {
	var out []int64
	for _, e := range ends {
		for k, n := range e.Sizes {
			if k >= len(out) {
				out = append(out, make([]int64, k+1-len(out))...)
			}
			out[k] += n
		}
	}
	return out
}

// childTimeout bounds each wait of the bench on its children: their
// start, the run, their stop.
const childTimeout = 10 * time.Minute

// runChildren starts a child process for each part, waits until all are
// ready, tells them to go, waits until they report total jobs done, and
// stops them. base is the server's URL (for backendCPU), app the
// application_name of the run's connections.
func runChildren(ctx context.Context, base string, parts []part, total int64, app string) (sample, []childEnd, error) {
	exe, err := os.Executable()
	if err != nil {
		return sample{}, nil, err
	}
	says := make(chan childSays, 16*len(parts))
	var children []*child
	defer func() {
		// A child still running here failed to stop: its stdin's end
		// stops it, and a kill after a minute.
		for _, ch := range children {
			ch.stdin.Close()
			done := make(chan struct{})
			go func() {
				defer close(done)
				_ = ch.wait()
			}()
			select {
			case <-done:
			case <-time.After(time.Minute):
				ch.kill()
				<-done
			}
		}
	}()
	for i, p := range parts {
		ch, err := startChild(exe, i, p, says)
		if err != nil {
			return sample{}, nil, err
		}
		children = append(children, ch)
	}
	ended := make([]bool, len(parts))
	next := func() (childSays, error) {
		select {
		case s := <-says:
			for s.err != nil && ended[s.idx] {
				// A child's output ends after its report: not an error.
				select {
				case s = <-says:
				case <-time.After(childTimeout):
					return childSays{}, errors.New("timed out waiting for the processes")
				}
			}
			if s.err != nil {
				return s, fmt.Errorf("process %d: %w", s.idx, s.err)
			}
			if s.msg.Err != "" {
				return s, fmt.Errorf("process %d: %s", s.idx, s.msg.Err)
			}
			return s, nil
		case <-time.After(childTimeout):
			return childSays{}, errors.New("timed out waiting for the processes")
		}
	}
	for ready := 0; ready < len(parts); {
		s, err := next()
		if err != nil {
			return sample{}, nil, err
		}
		if s.msg.Ready {
			ready++
		}
	}
	back0, err := backendCPU(ctx, base, app)
	if err != nil {
		return sample{}, nil, err
	}
	srv0, ok0 := serverCPU()
	t0 := time.Now()
	for _, ch := range children {
		if _, err := io.WriteString(ch.stdin, "go\n"); err != nil {
			return sample{}, nil, err
		}
	}
	for done := int64(0); done < total; {
		s, err := next()
		if err != nil {
			return sample{}, nil, err
		}
		done += s.msg.Done
	}
	smp := sample{wall: time.Since(t0), jobs: int(total)}
	if srv1, ok1 := serverCPU(); ok0 && ok1 && srv1 > srv0 {
		smp.whole = srv1 - srv0
	}
	back1, err := backendCPU(ctx, base, app)
	if err != nil {
		return sample{}, nil, err
	}
	for pid, t := range back1 {
		smp.server += t - back0[pid]
	}
	for _, ch := range children {
		if _, err := io.WriteString(ch.stdin, "stop\n"); err != nil {
			return sample{}, nil, err
		}
	}
	ends := make([]childEnd, len(parts))
	for got := 0; got < len(parts); {
		s, err := next()
		if err != nil {
			return sample{}, nil, err
		}
		if s.msg.End != nil {
			ends[s.idx], ended[s.idx] = *s.msg.End, true
			got++
		}
	}
	return smp, ends, nil
}

// startChild starts the process of part p, number i, whose messages go
// to says.
func startChild(exe string, i int, p part, says chan<- childSays) (*child, error) {
	spec, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-child", string(spec))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start process %d: %w", i, err)
	}
	go func() {
		dec := json.NewDecoder(stdout)
		for {
			var m childMsg
			if err := dec.Decode(&m); err != nil {
				if !errors.Is(err, io.EOF) {
					err = fmt.Errorf("its output: %w", err)
				} else {
					err = errors.New("ended without its report")
				}
				says <- childSays{idx: i, err: err}
				return
			}
			says <- childSays{idx: i, msg: m}
		}
	}()
	return &child{idx: i, stdin: stdin, wait: cmd.Wait, kill: func() { _ = cmd.Process.Kill() }}, nil
}

// backendCPU is the CPU spent so far by each server backend whose
// connection's application_name is app (pg_stat_activity lists them; a
// backend's CPU is read from /proc, so the server must be on this
// machine). Unlike serverCPU it leaves out the server's other work (the
// WAL writer, the checkpointer, other clients of a shared server) and
// the backends of the bench's own checks.
func backendCPU(ctx context.Context, base, app string) (map[int64]time.Duration, error) {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s", queue.RedactURL(err.Error()))
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, app)
	if err != nil {
		return nil, fmt.Errorf("postgres: backends: %w", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("postgres: backends: %w", err)
	}
	out := make(map[int64]time.Duration, len(pids))
	for _, pid := range pids {
		if t, ok := procCPU(pid); ok {
			out[pid] = t
		}
	}
	return out, nil
}

// procCPU is the CPU process pid has spent: from /proc/PID/schedstat (in
// nanoseconds) where the kernel keeps it, else from /proc/PID/stat (in
// clock ticks). schedstat counts the process's main thread alone, which
// is all of a PostgreSQL backend (one thread each).
func procCPU(pid int64) (time.Duration, bool) {
	dir := "/proc/" + strconv.FormatInt(pid, 10)
	if data, err := os.ReadFile(dir + "/schedstat"); err == nil {
		if f := strings.Fields(string(data)); len(f) > 0 {
			if ns, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				return time.Duration(ns), true
			}
		}
	}
	data, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return 0, false
	}
	_, fields, ok := procStat(data)
	if !ok || len(fields) < 13 {
		return 0, false
	}
	return time.Duration(atoi(fields[11])+atoi(fields[12])) * time.Second / clockTicks, true
}

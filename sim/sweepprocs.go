package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/scenarios"
)

// A sweep process's contract: it runs its seeds one at a time and prints,
// for each seed it judges, in seed order, one JSON line whose "record" is
// SeedLineRecord (a SeedLine's fields; any others are the caller's), and
// exits SweepExitPass when every seed passed, SweepExitFail when one
// failed or its range alone was long enough to require a declared
// coverage cell none reached. Lines of other records (a summary) are
// passed over.
const (
	SeedLineRecord = "seed"
	SweepExitPass  = 0
	SweepExitFail  = 1
)

// sweepProcessGrace is how long a stopped sweep waits for its processes
// to finish their seed, print what they judged and exit, before it kills
// them.
const sweepProcessGrace = 10 * time.Second

// seedLineBytesMax bounds one line a sweep process prints (a seed's
// record with its trace tail and timeline).
const seedLineBytesMax = 16 << 20

// SeedLine is one judged seed as a sweep process prints it: what the
// sweep judges it by, and the whole line for the caller's own record.
type SeedLine struct {
	Record   string   `json:"record"`
	Scenario string   `json:"scenario"`
	Seed     uint64   `json:"seed"`
	Pass     bool     `json:"pass"`
	Coverage Coverage `json:"coverage"`
	Line     []byte   `json:"-"`
}

// ProcessSweep splits a sweep of one scenario across processes (one per
// core unless told otherwise: separate processes share no locks, unlike
// goroutines over one SQLite library), each running a contiguous range of
// seeds in the environment SweepProcessEnv gives it.
type ProcessSweep struct {
	Scenario scenarios.Scenario
	From     uint64
	Count    int
	// Processes is how many processes run at once; 0 is one per core.
	Processes int
	// Command is the command line (program first) of the sweep process
	// for count seeds from from.
	Command func(from uint64, count int) []string
	// Rerun is the command a person runs to rerun the seeds of a range,
	// named in the error about it.
	Rerun func(from uint64, count int) string
	// Stderr receives the processes' standard error.
	Stderr io.Writer
	// Stop, once closed, sends every process SIGTERM (and kills it if it
	// has not exited within sweepProcessGrace): each then hands over the
	// seeds it judged, and Run hands on only those judged from the first
	// up to the first one not judged. Nil runs every seed.
	Stop <-chan struct{}
	// Clock times sweepProcessGrace after Stop; the caller gives the real
	// clock (a sweep's processes live in real time, not the simulator's).
	// Nil with a Stop is an error.
	Clock clockwork.Clock
}

// Run starts the processes, reads their lines and hands each seed's line
// to each in seed order, as soon as it and every seed before it are
// judged. A process that dies (a panic, a signal) or does not judge every
// seed of its range, or whose exit disagrees with its verdicts, is an
// error naming the range and the command that reruns it: its seeds not
// judged are never counted as passes.
func (p ProcessSweep) Run(each func(SeedLine)) error {
	processes := p.Processes
	if processes <= 0 {
		processes = runtime.NumCPU()
	}
	processes = min(processes, p.Count)
	if p.Stop != nil && p.Clock == nil {
		return errors.New("sim: a process sweep with a Stop needs a Clock for its grace")
	}
	children, err := p.start(processes)
	if err != nil {
		return err
	}
	done := make(chan struct{})
	defer close(done)
	go children.stopOn(p.Clock, p.Stop, done)
	whole := true // every child so far judged its whole range
	for i, c := range children {
		// Hand over the lines as they come, while they are in order; the
		// whole output is judged once the process has exited.
		handed := 0 // lines of c handed to each
		if whole {
			handed = p.stream(c, each)
		}
		hand := func(lines []SeedLine) { // lines[:handed] were handed as they came
			for ; handed < len(lines); handed++ {
				each(lines[handed])
			}
		}
		<-c.exited
		if closed(p.Stop) {
			if whole {
				lines := judgedPrefix(c.output(), p.Scenario.Name, c.from, c.n)
				hand(lines)
				whole = len(lines) == c.n
			}
			continue
		}
		var exit *exec.ExitError
		if c.werr != nil && !errors.As(c.werr, &exit) {
			children[i+1:].end()
			return fmt.Errorf("sweep process for seeds %d..%d: %w", c.from, c.from+uint64(c.n)-1, c.werr)
		}
		lines, err := judgeSweepProcess(c.output(), c.cmd.ProcessState.ExitCode(), c.cmd.ProcessState.String(), p.Scenario,
			c.from, c.n, p.Rerun(c.from, c.n))
		if err != nil {
			children[i+1:].end()
			return err
		}
		hand(lines)
	}
	return nil
}

// closed reports whether stop is closed, without waiting.
func closed(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// start starts processes over the sweep's seeds, in contiguous ranges of
// near-equal length. It starts none once Stop is closed; if one fails to
// start, those already started are killed and waited for.
func (p ProcessSweep) start(processes int) (sweepProcesses, error) {
	children := make(sweepProcesses, 0, processes)
	next := p.From
	for i := 0; i < processes && !closed(p.Stop); i++ {
		n := p.Count / processes
		if i < p.Count%processes {
			n++
		}
		argv := p.Command(next, n)
		c := &sweepProcess{from: next, n: n, more: make(chan struct{}, 1), exited: make(chan struct{})}
		c.cmd = exec.Command(argv[0], argv[1:]...)
		c.cmd.Env = SweepProcessEnv(os.Environ())
		c.cmd.Stdout, c.cmd.Stderr = c, p.Stderr
		if err := c.cmd.Start(); err != nil {
			children.end()
			return nil, fmt.Errorf("start sweep process: %w", err)
		}
		go func() {
			c.werr = c.cmd.Wait() // returns once all its output is in
			close(c.exited)
		}()
		children, next = append(children, c), next+uint64(n)
	}
	return children, nil
}

// stream hands each the seed lines c prints, as they come, while they are
// c's seeds in order; it returns how many it handed once c has exited,
// printed something out of order, or Stop is closed.
func (p ProcessSweep) stream(c *sweepProcess, each func(SeedLine)) int {
	handed := 0
	for inOrder, exited := true, false; inOrder && !exited && !closed(p.Stop); {
		select {
		case <-c.more:
		case <-c.exited:
			exited = true
		}
		for _, raw := range c.lines() {
			line, err := readSeedLine(raw)
			switch {
			case !inOrder:
			case err != nil:
				inOrder = false // not a record: the judging says so
			case line.Record != SeedLineRecord:
			case line.Scenario == p.Scenario.Name && line.Seed == c.from+uint64(handed) && handed < c.n:
				each(line)
				handed++
			default:
				inOrder = false
			}
		}
	}
	return handed
}

// sweepProcesses is a sweep's processes.
type sweepProcesses []*sweepProcess

// kill kills every process of cs.
func (cs sweepProcesses) kill() {
	for _, c := range cs {
		_ = c.cmd.Process.Kill()
	}
}

// end kills every process of cs and waits for each to exit.
func (cs sweepProcesses) end() {
	cs.kill()
	for _, c := range cs {
		<-c.exited
	}
}

// stopOn sends every process of cs SIGTERM once stop is closed, and kills
// them if done is not closed within sweepProcessGrace after; it returns at
// once when done is closed first.
func (cs sweepProcesses) stopOn(clock clockwork.Clock, stop, done <-chan struct{}) {
	select {
	case <-stop:
	case <-done:
		return
	}
	for _, c := range cs {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
	}
	t := clock.NewTimer(sweepProcessGrace)
	defer t.Stop()
	select {
	case <-t.Chan():
		cs.kill()
	case <-done:
	}
}

// sweepProcess is one process of a sweep: its range of seeds, and the
// output it has printed so far (it is the process's stdout).
type sweepProcess struct {
	cmd    *exec.Cmd
	from   uint64
	n      int
	more   chan struct{} // signalled after each write
	exited chan struct{} // closed once the process has exited and its output is in
	werr   error         // cmd.Wait's, once exited is closed

	mu   sync.Mutex
	out  bytes.Buffer
	read int // how much of out lines has returned
}

// Write takes in the process's output.
func (c *sweepProcess) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.out.Write(p)
	c.mu.Unlock()
	select {
	case c.more <- struct{}{}:
	default:
	}
	return len(p), nil
}

// lines returns the whole lines the process has printed since the last
// call.
func (c *sweepProcess) lines() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	fresh := c.out.Bytes()[c.read:]
	cut := bytes.LastIndexByte(fresh, '\n')
	if cut < 0 {
		return nil
	}
	c.read += cut + 1
	return bytes.Split(bytes.Clone(fresh[:cut]), []byte{'\n'})
}

// output returns a copy of what the process has printed so far.
func (c *sweepProcess) output() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.out.Bytes())
}

// readSeedLine reads one line a sweep process printed.
func readSeedLine(raw []byte) (SeedLine, error) {
	var line SeedLine
	if err := json.Unmarshal(raw, &line); err != nil {
		return SeedLine{}, err
	}
	if line.Record == "" {
		return SeedLine{}, errors.New(`no "record" field`)
	}
	line.Line = raw
	return line, nil
}

// readSeedLines reads the seed lines of a sweep process's output, in
// order, passing over blank lines and other records. A line that is not a
// record is an error, returned with the seed lines before it.
func readSeedLines(out []byte) ([]SeedLine, error) {
	var lines []SeedLine
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), seedLineBytesMax)
	for n := 1; sc.Scan(); n++ {
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		line, err := readSeedLine(bytes.Clone(raw))
		if err != nil {
			return lines, fmt.Errorf("line %d is not a record: %w", n, err)
		}
		if line.Record == SeedLineRecord {
			lines = append(lines, line)
		}
	}
	return lines, sc.Err()
}

// judgedPrefix returns the seed lines an interrupted sweep process
// printed for its seeds from from, in order, up to the first seed it did
// not judge (or a line cut short by its end).
func judgedPrefix(out []byte, scenario string, from uint64, n int) []SeedLine {
	if cut := bytes.LastIndexByte(out, '\n'); cut >= 0 {
		out = out[:cut+1]
	} else {
		out = nil
	}
	lines, _ := readSeedLines(out) // the lines before any bad one
	judged := 0
	for judged < len(lines) && judged < n && lines[judged].Seed == from+uint64(judged) && lines[judged].Scenario == scenario {
		judged++
	}
	return lines[:judged]
}

// judgeSweepProcess reads the lines a sweep process printed for its n
// seeds from from, and how it exited (code, and how as the process state
// says it), and returns its seeds' lines. Exit SweepExitPass with every
// seed passed and SweepExitFail with some failed (or a declared coverage
// cell unreached, when its range alone is long enough to require them)
// are the only good ends: any other exit (a panic exits 2, a signal -1),
// a line that is not a record, a seed missing or out of order, or an exit
// that disagrees with the verdicts is an error naming the range and
// rerun, the command that reruns it.
func judgeSweepProcess(out []byte, code int, how string, sc scenarios.Scenario, from uint64, n int, rerun string) ([]SeedLine, error) {
	last := from + uint64(n) - 1
	rerun = "rerun them: " + rerun
	lines, err := readSeedLines(out)
	judged := 0
	for judged < len(lines) && lines[judged].Seed == from+uint64(judged) && lines[judged].Scenario == sc.Name {
		judged++
	}
	if code != SweepExitPass && code != SweepExitFail {
		return nil, fmt.Errorf("sweep process for seeds %d..%d ended with %s after judging %d of %d seeds; %s", from, last, how, judged, n, rerun)
	}
	if err != nil {
		return nil, fmt.Errorf("sweep process for seeds %d..%d printed what is not a record (%v) after %d of its %d seeds; %s", from, last, err, judged, n, rerun)
	}
	if judged != n || len(lines) != n {
		return nil, fmt.Errorf("sweep process for seeds %d..%d judged %d of its %d seeds in order (printed %d seed records) and exited %d; %s",
			from, last, judged, n, len(lines), code, rerun)
	}
	failed := 0
	var cov Coverage
	for _, line := range lines {
		cov.Add(line.Coverage)
		if !line.Pass {
			failed++
		}
	}
	bad := failed > 0 || len(cov.Missing(sc)) > 0
	if bad != (code == SweepExitFail) {
		return nil, fmt.Errorf("sweep process for seeds %d..%d exited %d with %d of its %d seeds failed; %s", from, last, code, failed, n, rerun)
	}
	return lines, nil
}

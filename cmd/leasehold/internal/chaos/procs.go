package chaos

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// exitWaitMax bounds the wait for a signalled worker to exit.
const exitWaitMax = 10 * time.Second

// errNoWorker is returned for a worker the run does not know or that is
// not running.
var errNoWorker = errors.New("no such running worker")

// proc is one worker process, started again under the same name after
// each kill.
type proc struct {
	lane *lane
	name string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when the current process has exited
	stopped bool          // SIGSTOP sent, SIGCONT not yet
}

// args are the worker command line: the real worker over the lane's
// database and ledger, with leases short enough that kills play out in
// seconds.
func (p *proc) args() []string {
	l := p.lane
	return []string{"worker", "--db", l.dbPath, "--id", p.name, "--concurrency", strconv.Itoa(l.run.cfg.Concurrency),
		"--lease", l.run.cfg.Lease.String(), "--heartbeat", l.run.cfg.Heartbeat.String(), "--busy-timeout", "300ms",
		"--service-kind", l.kind, "--service-db", l.ledgerPath}
}

// start starts the worker, appending its output to its log.
func (p *proc) start() error {
	log, err := os.OpenFile(filepath.Join(p.lane.dir, p.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0o644) // a link there is refused, not written through
	if err != nil {
		return fmt.Errorf("start worker %s: %w", p.name, err)
	}
	cmd := exec.Command(p.lane.run.cfg.Binary, p.args()...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start worker %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait() // a killed worker's exit status is expected
		log.Close()
		close(done)
	}()
	p.mu.Lock()
	p.cmd, p.done, p.stopped = cmd, done, false
	p.mu.Unlock()
	p.lane.run.moment(p.lane.kind, p.name, MomentStart, fmt.Sprintf("started worker %s (pid %d)", p.name, cmd.Process.Pid))
	return nil
}

// alive reports whether the current process is running (stopped counts).
func (p *proc) alive() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// signal sends sig to the running process.
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("worker %s: %w", p.name, errNoWorker)
	}
	select {
	case <-p.done:
		return fmt.Errorf("worker %s: %w", p.name, errNoWorker)
	default:
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal worker %s: %w", p.name, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.stopped = true
	case syscall.SIGCONT:
		p.stopped = false
	}
	return nil
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill(kind, why string) error {
	p.mu.Lock()
	done := p.done
	pid := 0
	if p.cmd != nil {
		pid = p.cmd.Process.Pid
	}
	p.mu.Unlock()
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	p.lane.run.moment(p.lane.kind, p.name, kind, fmt.Sprintf("SIGKILL worker %s (pid %d): %s", p.name, pid, why))
	select {
	case <-done:
		p.lane.run.moment(p.lane.kind, p.name, MomentExit, fmt.Sprintf("worker %s exited", p.name))
		return nil
	case <-time.After(exitWaitMax):
		return fmt.Errorf("worker %s did not exit within %s of SIGKILL", p.name, exitWaitMax)
	}
}

// shutdown stops the process for good: SIGCONT (a stopped process cannot
// act on SIGTERM), SIGTERM, and SIGKILL if it has not exited in time.
func (p *proc) shutdown(grace time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(exitWaitMax):
		}
	}
}

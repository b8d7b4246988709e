package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// process is a child the harness started. Every child gets its own process
// group and dies with the harness (Pdeathsig), so nothing outlives a run.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error
}

// startProcess starts cmd with stdout and stderr appended to logPath unless
// the caller set them.
func startProcess(name string, cmd *exec.Cmd, logPath string) (*process, error) {
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	var logFile *os.File
	if logPath != "" {
		f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("opening %s log %s: %w", name, logPath, err)
		}
		logFile = f
		if cmd.Stdout == nil {
			cmd.Stdout = f
		}
		if cmd.Stderr == nil {
			cmd.Stderr = f
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		if logFile != nil {
			logFile.Close()
		}
		return nil, fmt.Errorf("starting %s (%s): %w", name, cmd.Path, err)
	}
	go func() {
		p.err = cmd.Wait()
		if logFile != nil {
			logFile.Close()
		}
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits up to grace, then kills the process group. It
// also kills the group after a clean exit, for helpers (squid's certificate
// generators) that may linger.
func (p *process) stop(grace time.Duration) {
	pgid := p.cmd.Process.Pid
	if !p.exited() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-p.done
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// logTail returns the last lines of the process log, for error messages.
func (p *process) logTail(lines int) string {
	if p.logPath == "" {
		return ""
	}
	raw, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	return tail(string(raw), lines)
}

// waitListening polls addr until it accepts a connection, the process
// exits, or ctx ends.
func waitListening(ctx context.Context, p *process, addr string) error {
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before listening on %s (%v); log:\n%s", p.name, addr, p.err, p.logTail(20))
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to listen on %s: %w; log:\n%s", p.name, addr, ctx.Err(), p.logTail(20))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startListener starts cmd (a re-run of the harness binary that prints
// "listening ADDR" once ready), registers its stop with cl, and returns the
// process and ADDR.
func startListener(ctx context.Context, name string, cmd *exec.Cmd, logPath string, cl *cleanups) (*process, string, error) {
	cmd.Env = testkit.CleanEnv()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", fmt.Errorf("piping %s's stdout: %w", name, err)
	}
	p, err := startProcess(name, cmd, logPath)
	if err != nil {
		return nil, "", err
	}
	cl.add(func() { p.stop(5 * time.Second) })
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	line, err := readLine(rctx, p, stdout)
	if err != nil {
		return nil, "", err
	}
	addr, ok := strings.CutPrefix(line, "listening ")
	if !ok {
		return nil, "", fmt.Errorf("%s printed %q, want \"listening ADDR\"", name, line)
	}
	return p, addr, nil
}

// readLine reads the first line a child prints on r, bounded by ctx.
func readLine(ctx context.Context, p *process, r io.Reader) (string, error) {
	type res struct {
		line string
		err  error
	}
	ch := make(chan res, 1)
	go func() {
		line, err := bufio.NewReader(r).ReadString('\n')
		ch <- res{strings.TrimSpace(line), err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return "", fmt.Errorf("reading %s's address: %w; log:\n%s", p.name, r.err, p.logTail(20))
		}
		return r.line, nil
	case <-ctx.Done():
		return "", fmt.Errorf("waiting for %s's address: %w", p.name, ctx.Err())
	}
}

// freePort returns a loopback port nobody listens on right now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// procStatus reads a kB field (VmRSS, VmHWM) of /proc/<pid>/status in KiB.
func procStatus(pid int, field string) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the status of pid %d: %w", pid, err)
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		v, ok := strings.CutPrefix(line, field+":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, fmt.Errorf("pid %d: no %s in /proc/%d/status", pid, field, pid)
}

func rssKiB(pid int) (int64, error) { return procStatus(pid, "VmRSS") }

// resetPeakRSS resets VmHWM to the current RSS (Linux >= 4.0); false when
// the kernel refuses, in which case only sampled RSS is reliable.
func resetPeakRSS(pid int) bool {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0) == nil
}

// rssSampler records the highest VmRSS of pid until stopped.
type rssSampler struct {
	stopCh chan struct{}
	done   chan struct{}
	max    int64
}

func sampleRSS(pid int, every time.Duration) *rssSampler {
	s := &rssSampler{stopCh: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if v, err := rssKiB(pid); err == nil && v > s.max {
				s.max = v
			}
			select {
			case <-s.stopCh:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// stop returns the highest RSS seen, in KiB.
func (s *rssSampler) stop() int64 {
	close(s.stopCh)
	<-s.done
	return s.max
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times (100 on every
// mainstream Linux build).
const clockTicks = 100

// procCPU returns the CPU time pid has used: the utime+stime of
// /proc/<pid>/stat, read at nanosecond resolution from the kernel's CPU
// clock of the process (the same sum over its live and exited threads,
// which /proc rounds to 10 ms per field: a 100 MiB download costs about
// 100 ms of proxy CPU), or from /proc/<pid>/stat where that clock fails.
func procCPU(pid int) (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(processCPUClock(pid), &ts); err == nil {
		return time.Duration(ts.Nano()), nil
	}
	return statCPU(pid)
}

// processCPUClock is the clock id of pid's CPU time, as glibc's
// clock_getcpuclockid makes it (CPUCLOCK_SCHED of the whole process).
func processCPUClock(pid int) int32 {
	const cpuclockSched = 2
	return int32(^pid)<<3 | cpuclockSched
}

// statCPU returns the user+system CPU time of /proc/<pid>/stat.
func statCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the CPU time of pid %d: %w", pid, err)
	}
	// The command name (field 2) may hold spaces; fields resume after ')'.
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("parsing /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("parsing /proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parsing /proc/%d/stat times", pid)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// cpuMeter measures the CPU a process uses over an interval; the zero
// value (pid 0) measures nothing.
type cpuMeter struct {
	pid   int
	start time.Duration
	ok    bool
}

func startCPU(pid int) cpuMeter {
	if pid == 0 {
		return cpuMeter{}
	}
	c, err := procCPU(pid)
	return cpuMeter{pid: pid, start: c, ok: err == nil}
}

// used returns the CPU used since startCPU; false when unmeasured.
func (m cpuMeter) used() (time.Duration, bool) {
	if !m.ok {
		return 0, false
	}
	c, err := procCPU(m.pid)
	if err != nil {
		return 0, false
	}
	return c - m.start, true
}

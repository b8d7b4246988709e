package sandboxhelper

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aileron-dev/aileron-proxy/api"
)

// RunSandboxExec is `internal sandbox exec`: it runs one command of the
// exec API. The request line (helperExecRequest) comes on stdin, which
// then stays open: its end means the client went away, and everything the
// command started is killed. The result is one JSON line on stdout
// (api.SandboxExecResult), written when the command exits or at its
// deadline, never later.
//
// The helper makes itself a child subreaper, so processes that leave the
// command's process group (`set -m; sleep 8 &`, double forks) stay its
// descendants: at the deadline, on abort and once the command exits, every
// descendant gets SIGTERM and, ExecKillGrace later, SIGKILL (on exit
// directly SIGKILL: nothing outlives its exec).
func RunExec(stdin io.Reader, stdout io.Writer) int {
	var req ExecRequest
	br, ok := readRequestLine(stdin, &req, "exec", "command", func() bool { return req.Command != "" })
	if !ok {
		return 2
	}
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	aborted := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, br)
		close(aborted)
	}()
	res, finish, err := runExec(req, aborted)
	if err != nil {
		out, _ := json.Marshal(Status{Error: fsError(err, req.Cwd)})
		_, _ = stdout.Write(append(out, '\n'))
		return 0
	}
	if res != nil {
		out, _ := json.Marshal(Status{SandboxExecResult: res})
		_, _ = stdout.Write(append(out, '\n'))
	}
	if f, ok := stdout.(*os.File); ok {
		_ = f.Close()
	}
	if finish != nil {
		finish()
	}
	return 0
}

// runExec runs req; res is nil when aborted. At the deadline it returns
// at once, with finish still to run: the grace period, then SIGKILL.
//
// It is long because the process, its pipes, the deadline and the abort
// share one lifetime; the pieces only make sense together.
func runExec(req ExecRequest, aborted <-chan struct{}) (res *api.SandboxExecResult, finish func(), err error) {
	shell := "/bin/sh"
	if p, err := exec.LookPath("bash"); err == nil {
		shell = p
	}
	if req.Cwd != "" {
		if fi, err := os.Stat(req.Cwd); err != nil {
			return nil, nil, err
		} else if !fi.IsDir() {
			return nil, nil, &os.PathError{Op: "chdir", Path: req.Cwd, Err: syscall.ENOTDIR}
		}
	}
	cmd := exec.Command(shell, "-c", req.Command)
	cmd.Dir = req.Cwd
	cmd.Env = layerEnv(os.Environ(), req.Env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, nil, err
	}
	stdout, stderr := &CappedBuffer{max: api.SandboxExecMaxOutput}, &CappedBuffer{max: api.SandboxExecMaxOutput}
	cmd.Stdout, cmd.Stderr = outW, errW
	start := time.Now()
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, nil, err
	}
	var copying sync.WaitGroup
	for _, p := range []struct {
		r *os.File
		b *CappedBuffer
	}{{outR, stdout}, {errR, stderr}} {
		copying.Add(1)
		go func() {
			defer copying.Done()
			_, _ = io.Copy(p.b, p.r)
			p.r.Close()
		}()
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var deadline <-chan time.Time
	if req.TimeoutMs > 0 {
		t := time.NewTimer(time.Duration(req.TimeoutMs) * time.Millisecond)
		defer t.Stop()
		deadline = t.C
	}
	result := func(code int, timedOut bool) *api.SandboxExecResult {
		note := truncationNote(stdout, stderr)
		stderr.note(note)
		return &api.SandboxExecResult{
			Stdout: stdout.String(), Stderr: stderr.String(), ExitCode: code, TimedOut: timedOut,
			Truncated: note != "", DurationMs: time.Since(start).Milliseconds(),
		}
	}
	select {
	case werr := <-exited:
		// The command is done; whatever it left behind holds no result.
		killDescendants(syscall.SIGKILL)
		waitCopying(&copying, time.Second)
		reapChildren()
		return result(exitStatus(cmd, werr), false), nil, nil
	case <-deadline:
		signalAll(cmd, syscall.SIGTERM)
		stderr.note(fmt.Sprintf("\n[aileron] timed out after %d ms: the command's processes were sent SIGTERM, then SIGKILL after %s; exit status %d\n",
			req.TimeoutMs, ExecKillGrace, ExecTimeoutExitCode))
		return result(ExecTimeoutExitCode, true), func() { terminate(cmd, exited, aborted, &copying) }, nil
	case <-aborted:
		signalAll(cmd, syscall.SIGTERM)
		terminate(cmd, exited, nil, &copying)
		return nil, nil, nil
	}
}

// signalAll sends sig to the command's process group and every
// descendant.
func signalAll(cmd *exec.Cmd, sig syscall.Signal) {
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	killDescendants(sig)
}

// terminate, after signalAll(SIGTERM), waits ExecKillGrace (less when
// aborted closes or nothing is left), sends SIGKILL to all and reaps them.
func terminate(cmd *exec.Cmd, exited <-chan error, aborted <-chan struct{}, copying *sync.WaitGroup) {
	grace := time.NewTimer(ExecKillGrace)
	defer grace.Stop()
	select {
	case <-grace.C:
	case <-aborted:
	case <-allGone(exited):
	}
	signalAll(cmd, syscall.SIGKILL)
	waitCopying(copying, 200*time.Millisecond)
	reapChildren()
}

// allGone closes once the command exited and no descendant is left.
func allGone(exited <-chan error) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		<-exited
		for len(descendants()) > 0 {
			reapChildren()
			time.Sleep(20 * time.Millisecond)
		}
		close(done)
	}()
	return done
}

// waitCopying waits up to d for the output to be drained.
func waitCopying(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// exitStatus is the command's exit status, 128+N when signal N killed it.
func exitStatus(cmd *exec.Cmd, err error) int {
	if ps := cmd.ProcessState; ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ps.ExitCode()
	}
	if err != nil {
		return 1
	}
	return 0
}

// killDescendants signals every descendant of this process, a few rounds
// so that processes forked meanwhile are caught too.
func killDescendants(sig syscall.Signal) {
	for range 5 {
		ds := descendants()
		if len(ds) == 0 {
			return
		}
		for _, pid := range ds {
			_ = syscall.Kill(pid, sig)
		}
		if sig != syscall.SIGKILL {
			return
		}
		reapChildren()
		time.Sleep(10 * time.Millisecond)
	}
}

// reapChildren collects exited children (orphans reparented to this
// subreaper included) without blocking.
func reapChildren() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}

// descendants lists the live (non-zombie) descendants of this process,
// from /proc.
func descendants() []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(raw, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(raw[i+1:]))
		if len(f) < 2 || f[0] == "Z" {
			continue
		}
		ppid, err := strconv.Atoi(f[1])
		if err != nil {
			continue
		}
		children[ppid] = append(children[ppid], pid)
	}
	var out []int
	queue := []int{os.Getpid()}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// SandboxHold is `internal sandbox hold`, a long-lived sandbox's main
// process (PID 1): it reaps orphans until ctx ends (SIGTERM). Every exit
// of a child sends SIGCHLD after the child became a zombie; one dropped
// because chld is full is covered by the pending one, and each wake-up
// reaps all zombies, so no exit goes unreaped.
func Hold(ctx context.Context) {
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	defer signal.Stop(chld)
	for {
		reapChildren()
		select {
		case <-ctx.Done():
			return
		case <-chld:
		}
	}
}

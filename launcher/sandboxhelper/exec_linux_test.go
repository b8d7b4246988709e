package sandboxhelper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aileron-dev/aileron-proxy/api"
)

// TestMain runs the test binary as execHelper's child process when asked,
// so the helper is not a test that reports SKIP in every run.
func TestMain(m *testing.M) {
	if os.Getenv("AILERON_TEST_EXEC_HELPER") == "1" {
		os.Exit(RunExec(os.Stdin, os.Stdout))
	}
	if os.Getenv("AILERON_TEST_HOLD") == "1" {
		os.Exit(holdReapsOrphan())
	}
	os.Exit(m.Run())
}

// holdReapsOrphan is TestSandboxHoldReapsOrphans's child process: a
// subreaper (as PID 1 is) that gets an orphan and runs SandboxHold; it
// exits 0 once the orphan, exited, has been reaped.
func holdReapsOrphan() int {
	// Without the subreaper the orphan would go to the real init, which
	// reaps it whether SandboxHold works or not.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "PR_SET_CHILD_SUBREAPER:", err)
		return 2
	}
	out, err := exec.Command("sh", "-c", "sleep 0.5 >/dev/null 2>&1 & echo $!").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the orphan:", err)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	held := make(chan struct{})
	go func() { Hold(ctx); close(held) }()
	defer func() { cancel(); <-held }()
	proc := "/proc/" + strings.TrimSpace(string(out))
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(proc); errors.Is(err, fs.ErrNotExist) {
			return 0
		}
	}
	fmt.Fprintln(os.Stderr, "the orphan was not reaped within 5s:", proc)
	return 1
}

// TestSandboxHoldReapsOrphans: SandboxHold reaps an orphan that exits
// while it waits, on SIGCHLD alone.
func TestSandboxHoldReapsOrphans(t *testing.T) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "AILERON_TEST_HOLD=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("SandboxHold with an orphan: %v: %s", err, out)
	}
}

// execHelper runs RunSandboxExec in a child process (it makes itself a
// subreaper and kills its descendants), as `internal sandbox exec` does in
// the container; closing the returned stdin aborts it.
func execHelper(t *testing.T, req ExecRequest) (stdin io.WriteCloser, result <-chan *api.SandboxExecResult) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "AILERON_TEST_EXEC_HELPER=1")
	inW, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inW.Close(); _ = cmd.Wait() })
	line, _ := json.Marshal(req)
	if _, err := inW.Write(append(line, '\n')); err != nil {
		t.Fatal(err)
	}
	res := make(chan *api.SandboxExecResult, 1)
	go func() {
		raw, _ := io.ReadAll(outR)
		if len(raw) == 0 {
			res <- nil
			return
		}
		var r api.SandboxExecResult
		if err := json.Unmarshal(raw[:strings.IndexByte(string(raw), '\n')], &r); err != nil {
			t.Errorf("result %q: %v", raw, err)
		}
		res <- &r
	}()
	return inW, res
}

func waitResult(t *testing.T, ch <-chan *api.SandboxExecResult, within time.Duration) *api.SandboxExecResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(within):
		t.Fatalf("no result within %s", within)
		return nil
	}
}

// TestSandboxExecHelper covers the exec helper's contract outside a
// container: exit codes, env layering, the deadline (124 even when SIGTERM
// is trapped, answered at once, nothing left running), a child that left
// the group, and an abort.
func TestSandboxExecHelper(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "marker")
	t.Run("exit and env", func(t *testing.T) {
		t.Setenv("BASE_VAR", "base")
		in, res := execHelper(t, ExecRequest{Command: `echo "$BASE_VAR $OVER"; echo e >&2; exit 3`, Env: map[string]string{"OVER": "over"}})
		defer in.Close()
		r := waitResult(t, res, 10*time.Second)
		if r.ExitCode != 3 || r.Stdout != "base over\n" || r.Stderr != "e\n" || r.TimedOut {
			t.Errorf("result = %+v", r)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		start := time.Now()
		in, res := execHelper(t, ExecRequest{Command: "trap 'exit 0' TERM; set -m; (sleep 2; touch " + marker + ") & sleep 30 & wait", TimeoutMs: 300})
		defer in.Close()
		r := waitResult(t, res, 10*time.Second)
		if d := time.Since(start); d > 1500*time.Millisecond {
			t.Errorf("answered after %s, want at the deadline", d)
		}
		if r.ExitCode != ExecTimeoutExitCode || !r.TimedOut || !strings.Contains(r.Stderr, "timed out after 300 ms") {
			t.Errorf("result = %+v", r)
		}
		time.Sleep(3 * time.Second)
		if _, err := os.Stat(marker); err == nil {
			t.Error("a grandchild that left the process group outlived the timeout")
		}
	})
	t.Run("background child", func(t *testing.T) {
		start := time.Now()
		in, res := execHelper(t, ExecRequest{Command: "set -m; sleep 8 & echo started"})
		defer in.Close()
		if r := waitResult(t, res, 5*time.Second); r.Stdout != "started\n" || time.Since(start) > 2*time.Second {
			t.Errorf("result = %+v after %s", r, time.Since(start))
		}
	})
	t.Run("abort", func(t *testing.T) {
		m := marker + "-abort"
		// SIGTERM is ignored: SIGKILL follows ExecKillGrace later.
		in, res := execHelper(t, ExecRequest{Command: "trap '' TERM; sleep 3; touch " + m})
		time.Sleep(200 * time.Millisecond)
		in.Close()
		if r := waitResult(t, res, 5*time.Second); r != nil {
			t.Errorf("an aborted command answered %+v", r)
		}
		time.Sleep(4 * time.Second)
		if _, err := os.Stat(m); err == nil {
			t.Error("an aborted command kept running")
		}
	})
	t.Run("output cap", func(t *testing.T) {
		// The prefix is kept, the exit status is the command's, and a note
		// at the end of stderr names the cut streams and the cap.
		note := fmt.Sprintf("exceeded %d bytes (16 MiB), the cap of each stream; the rest was dropped\n", api.SandboxExecMaxOutput)
		cmd := fmt.Sprintf("head -c %d /dev/zero | tr '\\0' a; echo done >&2; exit 5", api.SandboxExecMaxOutput+1000)
		in, res := execHelper(t, ExecRequest{Command: cmd})
		defer in.Close()
		r := waitResult(t, res, 30*time.Second)
		if len(r.Stdout) != api.SandboxExecMaxOutput || strings.Trim(r.Stdout, "a") != "" || !r.Truncated || r.ExitCode != 5 {
			t.Errorf("capped output: %d bytes, truncated %v, exit %d; want %d bytes of a, true, 5", len(r.Stdout), r.Truncated, r.ExitCode, api.SandboxExecMaxOutput)
		}
		if want := "done\n\n[aileron] output truncated: stdout " + note; r.Stderr != want {
			t.Errorf("stderr = %q, want %q", r.Stderr, want)
		}
		cmd = fmt.Sprintf("head -c %d /dev/zero | tr '\\0' e >&2", api.SandboxExecMaxOutput+1)
		in2, res2 := execHelper(t, ExecRequest{Command: cmd})
		defer in2.Close()
		r = waitResult(t, res2, 30*time.Second)
		prefix, tail, _ := strings.Cut(r.Stderr, "\n")
		if len(prefix) != api.SandboxExecMaxOutput || tail != "[aileron] output truncated: stderr "+note || !r.Truncated || r.Stdout != "" {
			t.Errorf("capped stderr: %d bytes then %q, truncated %v; want %d bytes, the note, true", len(prefix), tail, r.Truncated, api.SandboxExecMaxOutput)
		}
	})
}

package state

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/pgtest"
)

// ownerEnv makes the test binary a child process that opens the store in
// the home it names, says "ready" and waits to be killed.
const ownerEnv = "AILERON_STATE_TEST_OWNER_HOME"

func TestMain(m *testing.M) {
	if home := os.Getenv(ownerEnv); home != "" {
		st, err := Open(context.Background(), Config{Home: home})
		if err != nil {
			os.Stdout.WriteString("error: " + err.Error() + "\n")
			os.Exit(1)
		}
		if err := st.PutSession(context.Background(), testSession("from-child")); err != nil {
			os.Stdout.WriteString("error: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString("ready\n")
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	// One PostgreSQL server for the Postgres store's tests.
	os.Exit(pgtest.Run(m))
}

// TestLockAcrossProcesses: while another process has the store open, Open
// is refused; once that process is killed (SIGKILL: no Close), Open
// succeeds and finds what it committed.
func TestLockAcrossProcesses(t *testing.T) {
	home := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), ownerEnv+"="+home)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("child said %q, %v", line, err)
	}
	_, err = Open(context.Background(), Config{Home: home})
	if err == nil || !strings.Contains(err.Error(), "another aileron-proxy serve is using this AILERON_HOME") || !strings.Contains(err.Error(), "postgres") {
		t.Fatalf("Open while another process has the store = %v, want the refusal", err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	killed = true
	st := openHome(t, home)
	if _, err := st.Session(context.Background(), "from-child"); err != nil {
		t.Errorf("after the owner was killed, its committed session: %v", err)
	}
}

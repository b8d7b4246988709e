package launcher

import (
	"context"
	"io"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
	"go.uber.org/zap/zaptest"
)

// fakeExec records invocations and answers through respond.
type fakeExec struct {
	mu      sync.Mutex
	calls   []runtime.Command
	envFile map[string]string // env file path → contents, read during the call
	respond func(c runtime.Command) (stdout, stderr string, err error)
}

func (f *fakeExec) exec(_ context.Context, c runtime.Command) error {
	f.mu.Lock()
	f.calls = append(f.calls, c)
	for i, a := range c.Args {
		if a == "--env-file" && i+1 < len(c.Args) {
			b, err := os.ReadFile(c.Args[i+1])
			if err != nil {
				panic(err)
			}
			st, _ := os.Stat(c.Args[i+1])
			if f.envFile == nil {
				f.envFile = map[string]string{}
			}
			f.envFile[c.Args[i+1]] = st.Mode().Perm().String() + "\n" + string(b)
		}
	}
	f.mu.Unlock()
	var out, errOut string
	var err error
	if f.respond != nil {
		out, errOut, err = f.respond(c)
	}
	if c.Stdout != nil {
		io.WriteString(c.Stdout, out)
	}
	if c.Stderr != nil {
		io.WriteString(c.Stderr, errOut)
	}
	return err
}

func (f *fakeExec) argv(i int) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[i].Path + " " + strings.Join(f.calls[i].Args, " ")
}

func lookAll(string) (string, error) { return "/usr/bin/x", nil }

func newFakeRuntime(t *testing.T, kind runtime.Kind, f *fakeExec) runtime.Runtime {
	t.Helper()
	rt, err := runtime.New(context.Background(), runtime.Config{Kind: kind, Logger: zaptest.NewLogger(t), Exec: f.exec, LookPath: lookAll})
	if err != nil {
		t.Fatalf("NewRuntime(%s): %v", kind, err)
	}
	return rt
}

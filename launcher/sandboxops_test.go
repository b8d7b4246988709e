package launcher

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/api"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
)

// TestSandboxCallStatus: exec and fs calls read the helper's one status
// line the same way: a result, a file error, nothing (the helper's end,
// or the caller's context once it ended).
func TestSandboxCallStatus(t *testing.T) {
	// helper answers line on stdout; with abort it first waits for its
	// stdin to end, as the helper does when the caller goes away.
	helper := func(line string, abort bool) *fakeExec {
		return &fakeExec{respond: func(c runtime.Command) (string, string, error) {
			if abort {
				_, _ = io.Copy(io.Discard, c.Stdin)
			}
			return line, "", nil
		}}
	}
	call := func(t *testing.T, f *fakeExec, ctx context.Context, verb string) (*api.SandboxExecResult, error) {
		t.Helper()
		sb := addTestSandbox(t, newTestSandboxManager(t), newFakeRuntime(t, runtime.Docker, f), "sbx_c", &removals{})
		if verb == "exec" {
			return sb.Exec(ctx, api.SandboxExecRequest{Command: "true"})
		}
		_, err := sb.FS(ctx, verb, api.SandboxFSRequest{Path: "/w"})
		return nil, err
	}
	t.Run("exec result", func(t *testing.T) {
		res, err := call(t, helper(`{"stdout":"hi\n","stderr":"","exitCode":3,"timedOut":false,"truncated":false,"durationMs":5}`+"\n", false), context.Background(), "exec")
		if err != nil || res == nil || res.Stdout != "hi\n" || res.ExitCode != 3 || res.DurationMs != 5 {
			t.Errorf("Exec = %+v, %v; want stdout hi, exit 3", res, err)
		}
	})
	for _, verb := range []string{"exec", "stat"} {
		t.Run(verb+" file error", func(t *testing.T) {
			_, err := call(t, helper(`{"error":{"code":"ENOENT","message":"ENOENT: no such file or directory","path":"/w"}}`+"\n", false), context.Background(), verb)
			var fe *api.SandboxFSError
			if !errors.As(err, &fe) || fe.Code != "ENOENT" {
				t.Errorf("%s = %v, want ENOENT", verb, err)
			}
		})
		t.Run(verb+" no status", func(t *testing.T) {
			if _, err := call(t, helper("", false), context.Background(), verb); err == nil || !strings.Contains(err.Error(), "the helper printed no result") {
				t.Errorf("%s without a status line = %v, want the helper's failure", verb, err)
			}
		})
		t.Run(verb+" caller gone", func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel)
			start := time.Now()
			_, err := call(t, helper("", true), ctx, verb)
			if !errors.Is(err, context.Canceled) || time.Since(start) > 5*time.Second {
				t.Errorf("%s whose caller went away = %v after %s, want context.Canceled at once", verb, err, time.Since(start))
			}
		})
	}
}

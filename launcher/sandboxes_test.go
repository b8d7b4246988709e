package launcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/aileron-dev/aileron-proxy/api"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
)

// newTestSandboxManager returns a manager whose sandboxes are added by
// addTestSandbox; CreateSandbox is not usable.
func newTestSandboxManager(t *testing.T) *SandboxManager {
	t.Helper()
	m, err := NewSandboxManager(SandboxManagerConfig{
		Logger: zaptest.NewLogger(t), Sessions: &fakeSessions{},
		Daemon: DaemonEndpoints{ProxyAddr: "127.0.0.1:1", APIURL: "http://127.0.0.1:2"},
		Inputs: func() (SandboxInputs, error) { return SandboxInputs{}, nil },
		Runtime: func(context.Context, runtime.Kind) (runtime.Runtime, error) {
			return nil, errors.New("not in the test")
		},
		GuardBinary: func() (string, error) { return "", errors.New("not in the test") },
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// removals counts, per sandbox ID, the runs of its composition's undo
// steps.
type removals struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *removals) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[id]
}

// addTestSandbox registers a running sandbox id on rt, as CreateSandbox
// does once its composition is up; its one undo step counts in r.
func addTestSandbox(t *testing.T, m *SandboxManager, rt runtime.Runtime, id string, r *removals) *sandbox {
	t.Helper()
	sb := m.newSandbox(rt)
	sb.info = api.SandboxInfo{ID: id, State: SandboxRunning, Container: "aileron-" + id, User: "1000:1000", Workdir: "/w", CreatedAt: time.Now()}
	sb.l = &launch{log: zaptest.NewLogger(t), cfg: LaunchConfig{CleanupTimeout: time.Second}}
	sb.l.onExit("removing container", func(context.Context) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.n == nil {
			r.n = map[string]int{}
		}
		r.n[id]++
		return nil
	})
	m.mu.Lock()
	m.boxes[id] = sb
	m.mu.Unlock()
	return sb
}

// isLive reports whether id is still among the manager's live sandboxes.
func isLive(m *SandboxManager, id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.boxes[id]
	return ok
}

// TestSandboxRemoveForgets: a removed sandbox leaves the live ones, its
// token still answers SANDBOX_GONE for RemovedRetention after its removal
// (however many sandboxes are removed meanwhile), and after that its ID
// is unknown.
func TestSandboxRemoveForgets(t *testing.T) {
	ctx := context.Background()
	m := newTestSandboxManager(t)
	now := new(time.Time)
	*now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.cfg.Now = func() time.Time { return *now }
	var r removals
	addTestSandbox(t, m, &fakeRuntime{}, "sbx_a", &r)
	addTestSandbox(t, m, &fakeRuntime{}, "sbx_b", &r)
	if err := m.RemoveSandbox(ctx, "sbx_a"); err != nil {
		t.Fatalf("RemoveSandbox(sbx_a) = %v", err)
	}
	if isLive(m, "sbx_a") {
		t.Error("the removed sbx_a is still among the live sandboxes")
	}
	if l := m.ListSandboxes(); len(l) != 1 || l[0].ID != "sbx_b" {
		t.Errorf("ListSandboxes = %+v, want sbx_b only", l)
	}
	sb, ok := m.Sandbox("sbx_a")
	if !ok {
		t.Fatal("the just removed sbx_a is unknown; its token must get 410, not 401")
	}
	if _, err := sb.Exec(ctx, api.SandboxExecRequest{Command: "true"}); !errors.Is(err, api.ErrSandboxGone) {
		t.Errorf("Exec in the removed sbx_a = %v, want ErrSandboxGone", err)
	}
	if err := m.RemoveSandbox(ctx, "sbx_a"); err != nil || r.count("sbx_a") != 1 {
		t.Errorf("RemoveSandbox(sbx_a) again = %v with %d cleanups, want nil and 1", err, r.count("sbx_a"))
	}
	// Many later removals do not push it out: only time does.
	for i := range 300 {
		id := fmt.Sprintf("sbx_%d", i)
		addTestSandbox(t, m, &fakeRuntime{}, id, &r)
		if err := m.RemoveSandbox(ctx, id); err != nil {
			t.Fatalf("RemoveSandbox(%s) = %v", id, err)
		}
	}
	if _, ok := m.Sandbox("sbx_a"); !ok {
		t.Error("sbx_a is unknown after 300 later removals within RemovedRetention; a count must not forget it")
	}
	*now = now.Add(RemovedRetention + time.Second)
	addTestSandbox(t, m, &fakeRuntime{}, "sbx_late", &r)
	if err := m.RemoveSandbox(ctx, "sbx_late"); err != nil {
		t.Fatalf("RemoveSandbox(sbx_late) = %v", err)
	}
	m.mu.Lock()
	live, removed := len(m.boxes), len(m.removed)
	m.mu.Unlock()
	if live != 1 || removed != 1 {
		t.Errorf("after RemovedRetention and one more removal: %d live, %d removed kept; want 1 and 1 (sbx_late)", live, removed)
	}
	if _, ok := m.Sandbox("sbx_a"); ok {
		t.Error("sbx_a is still known RemovedRetention after its removal")
	}
	if err := m.RemoveSandbox(ctx, "sbx_a"); !errors.Is(err, api.ErrSandboxNotFound) {
		t.Errorf("RemoveSandbox(forgotten sbx_a) = %v, want ErrSandboxNotFound", err)
	}
}

// TestSandboxFoundDeadIsRemoved: a call that finds the container gone
// answers SANDBOX_GONE and removes the sandbox, with either runtime.
func TestSandboxFoundDeadIsRemoved(t *testing.T) {
	for _, tc := range []struct {
		kind   runtime.Kind
		stderr string
	}{
		{runtime.Docker, "Error response from daemon: No such container: aileron-sbx_dead"},
		{runtime.Podman, "Error: can only create exec sessions on running containers: container state improper"},
	} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			m := newTestSandboxManager(t)
			var r removals
			f := &fakeExec{respond: func(runtime.Command) (string, string, error) { return "", tc.stderr, &runtime.ExitError{Code: 125} }}
			sb := addTestSandbox(t, m, newFakeRuntime(t, tc.kind, f), "sbx_dead", &r)
			if _, err := sb.Exec(context.Background(), api.SandboxExecRequest{Command: "true"}); !errors.Is(err, api.ErrSandboxGone) {
				t.Fatalf("Exec = %v, want ErrSandboxGone", err)
			}
			deadline := time.Now().Add(5 * time.Second)
			for isLive(m, "sbx_dead") || r.count("sbx_dead") != 1 {
				if time.Now().After(deadline) {
					t.Fatalf("5s after the call found the container gone: live %v, %d cleanups; want removed", isLive(m, "sbx_dead"), r.count("sbx_dead"))
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := m.RemoveSandbox(context.Background(), "sbx_dead"); err != nil || r.count("sbx_dead") != 1 {
				t.Errorf("RemoveSandbox after = %v with %d cleanups, want nil and 1 (sandbox down still works)", err, r.count("sbx_dead"))
			}
		})
	}
}

// TestSandboxCloseWaitsForRemovals: Close returns only once a removal
// already under way (here RemoveSandbox, as a TTL does) has finished.
func TestSandboxCloseWaitsForRemovals(t *testing.T) {
	m := newTestSandboxManager(t)
	sb := addTestSandbox(t, m, &fakeRuntime{}, "sbx_slow", &removals{})
	release := make(chan struct{})
	sb.l.onExit("a slow step", func(context.Context) error { <-release; return nil })
	go func() { _ = m.RemoveSandbox(context.Background(), "sbx_slow") }()
	for deadline := time.Now().Add(5 * time.Second); isLive(m, "sbx_slow"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("RemoveSandbox did not start within 5s")
		}
	}
	closed := make(chan struct{})
	go func() { m.Close(context.Background()); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a removal was under way")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return within 5s of the removal's end")
	}
}

// TestSandboxExpiredWhileComposed: a sandbox whose TTL ended while it was
// being composed (a slow image build, a loaded host) is removed at once,
// not kept forever for want of a timer.
func TestSandboxExpiredWhileComposed(t *testing.T) {
	m := newTestSandboxManager(t)
	var r removals
	sb := addTestSandbox(t, m, &fakeRuntime{}, "sbx_late", &r)
	sb.info.ExpiresAt = time.Now().Add(-time.Second)
	m.expireAt(sb)
	for deadline := time.Now().Add(5 * time.Second); r.count("sbx_late") != 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a sandbox whose TTL was already over is still there 5s later")
		}
	}
	if isLive(m, "sbx_late") {
		t.Error("the expired sandbox is still live")
	}
}

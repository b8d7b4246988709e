package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/audit"
)

func auditTestWrite(t *testing.T, home string, events ...audit.Event) {
	t.Helper()
	w, err := audit.Open(filepath.Join(home, "audit", "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		w.Record(e)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestAuditTailCommand(t *testing.T) {
	home := t.TempDir()
	at := time.Date(2026, 5, 4, 3, 2, 1, 0, time.UTC)
	auditTestWrite(t, home,
		audit.Event{Time: at, Event: audit.EventProxied, AuditID: "aud_1", SessionID: "s1", ConnectorFQN: "github://acme/gh",
			Tool: "gh", Operation: "list-issues", Method: "GET", Host: "api.github.com:443", Path: "/repos/a/b/issues",
			Status: 200, Decision: "allowed", CredentialKind: "bearer", BytesOut: 512, DurationMS: 12},
		audit.Event{Time: at.Add(time.Second), Event: audit.EventDenied, AuditID: "aud_2", SessionID: "s2", Method: "DELETE",
			Host: "api.github.com:443", Path: "/repos/a/b", Status: 403, Decision: "denied", Reason: "operation_not_allowed"},
		audit.Event{Time: at.Add(2 * time.Second), Event: audit.EventSessionEnded, AuditID: "aud_3", SessionID: "s1"},
	)
	stdout, stderr, code := runCLI(t, home, "", nil, "audit", "tail")
	if code != exitOK || stderr != "" {
		t.Fatalf("audit tail: exit %d, stderr %q", code, stderr)
	}
	want := "2026-05-04T03:02:01Z connector.proxy.proxied s1 allowed 200 GET api.github.com:443 /repos/a/b/issues github://acme/gh gh/list-issues -\n" +
		"2026-05-04T03:02:02Z connector.proxy.denied s2 denied 403 DELETE api.github.com:443 /repos/a/b - - operation_not_allowed\n" +
		"2026-05-04T03:02:03Z session.ended s1 - - - - - - - -\n"
	if stdout != want {
		t.Fatalf("audit tail =\n%s\nwant\n%s", stdout, want)
	}
	stdout, _, code = runCLI(t, home, "", nil, "audit", "tail", "--session", "s1", "-n", "1", "--json")
	var e audit.Event
	if code != exitOK || strings.Count(stdout, "\n") != 1 || json.Unmarshal([]byte(stdout), &e) != nil || e.AuditID != "aud_3" {
		t.Fatalf("tail --session s1 -n 1 --json: exit %d, %q", code, stdout)
	}
	stdout, _, _ = runCLI(t, home, "", nil, "audit", "tail", "--json")
	for i, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil || m["audit_id"] == nil || m["event"] == nil {
			t.Fatalf("--json line %d %q: %v", i, line, err)
		}
	}

	empty := t.TempDir()
	stdout, stderr, code = runCLI(t, empty, "", nil, "audit", "tail")
	if code != exitOK || stdout != "" || !strings.Contains(stderr, "No audit events yet") {
		t.Fatalf("tail without a log: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	for _, args := range [][]string{{"audit", "tail", "-n", "-1"}, {"audit", "tail", "extra"}, {"audit", "tail", "--nope"}, {"audit", "x"}} {
		if _, stderr, code := runCLI(t, home, "", nil, args...); code != exitUsage {
			t.Errorf("%q: exit %d (%s), want %d", args, code, stderr, exitUsage)
		}
	}
}

// auditSyncBuffer is a bytes.Buffer safe for a writer and a reader.
type auditSyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *auditSyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *auditSyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestAuditTailFollowCommand(t *testing.T) {
	home := t.TempDir()
	var stdout, stderr auditSyncBuffer
	root := newRootCmd(newApp(strings.NewReader(""), &stdout, &stderr, func(string) string { return "" }))
	root.SetArgs([]string{"--home", home, "audit", "tail", "-f", "--session", "s1", "--json"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()

	// The log does not exist yet; tail waits for it.
	auditTestWrite(t, home,
		audit.Event{Event: audit.EventProxied, AuditID: "aud_other", SessionID: "s2"},
		audit.Event{Event: audit.EventProxied, AuditID: "aud_mine", SessionID: "s1"},
	)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(stdout.String(), "aud_mine") {
		if time.Now().After(deadline) {
			t.Fatalf("followed event not printed within 10s; stdout %q stderr %q", stdout.String(), stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		var ee *exitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("tail -f returned %v after cancel", err)
		}
		if err != nil {
			t.Fatalf("tail -f exit %d: %v", ee.code, ee.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("tail -f did not stop after cancel")
	}
	if strings.Contains(stdout.String(), "aud_other") {
		t.Fatalf("another session's event was printed: %s", stdout.String())
	}
}

// TestAuditTailReportsTornLines: a torn line left by an older writer is
// skipped with a warning naming its offset, and the events around it are
// printed; the command succeeds.
func TestAuditTailReportsTornLines(t *testing.T) {
	home := t.TempDir()
	at := time.Date(2026, 5, 4, 3, 2, 1, 0, time.UTC)
	first, _ := audit.Marshal(audit.Event{Time: at, Event: audit.EventProxied, AuditID: "aud_1", SessionID: "s1"})
	second, _ := audit.Marshal(audit.Event{Time: at.Add(time.Second), Event: audit.EventProxied, AuditID: "aud_2", SessionID: "s1"})
	raw := append(append(append([]byte{}, first...), second[:20]...), second...)
	path := filepath.Join(home, "audit", "audit.jsonl")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runCLI(t, home, "", nil, "audit", "tail")
	if code != exitOK || strings.Count(stdout, "\n") != 2 || !strings.Contains(stdout, "03:02:02Z") {
		t.Fatalf("audit tail over a torn line: exit %d, stdout %q", code, stdout)
	}
	want := "warning: " + path + ": skipped a torn line at byte " + strconv.Itoa(len(first)) + " (20 bytes"
	if !strings.HasPrefix(stderr, want) {
		t.Fatalf("stderr = %q, want it to start with %q", stderr, want)
	}
}

package api

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/approval"
)

func TestReadDaemonInfo(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		content string // empty: no file
		wantErr string
	}{
		{"missing", "", "no aileron-proxy daemon is running (daemon.json not found); start one with `aileron-proxy serve`"},
		{"not json", "{", "parsing"},
		{"bad url", `{"api_url":"ftp://x","admin_token":"t"}`, "is not an http(s) URL"},
		{"no token", `{"api_url":"http://127.0.0.1:7700"}`, "admin_token is empty"},
		{"ok", `{"api_url":"http://127.0.0.1:7700","proxy_addr":"127.0.0.1:3128","admin_token":"t","pid":7}`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name+".json")
			if tc.content != "" {
				if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			info, err := ReadDaemonInfo(p)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ReadDaemonInfo = %v, want an error containing %q", err, tc.wantErr)
				}
				if tc.name == "missing" && !errors.Is(err, ErrNoDaemon) {
					t.Error("a missing file is not ErrNoDaemon")
				}
				return
			}
			if err != nil || info.PID != 7 || info.ProxyAddr != "127.0.0.1:3128" {
				t.Errorf("ReadDaemonInfo = %+v, %v", info, err)
			}
		})
	}
}

func TestClientAgainstServer(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	p := filepath.Join(t.TempDir(), "daemon.json")
	raw, _ := json.Marshal(DaemonInfo{APIURL: h.url + "/", AdminToken: adminToken, PID: 1})
	if err := os.WriteFile(p, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(p)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := c.CreateSession(ctx, CreateSessionRequest{Connectors: []string{fqnOther}})
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.ListSessions(ctx)
	if err != nil || len(list) != 1 || list[0].ID != s.ID {
		t.Errorf("ListSessions = %+v, %v", list, err)
	}
	if err := c.EndSession(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	err = c.EndSession(ctx, s.ID)
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 409 || ae.Err.Code != CodeSessionEnded {
		t.Errorf("second EndSession = %v, want an APIError 409 session_ended", err)
	}
	if _, err := c.DecideApproval(ctx, "apr_x", approval.DecisionApprove, approval.RememberOnce); !errors.As(err, &ae) || ae.Err.Code != CodeApprovalNotFound {
		t.Errorf("DecideApproval(unknown) = %v", err)
	}
	if pend, err := c.ListApprovals(ctx, ""); err != nil || len(pend) != 0 {
		t.Errorf("ListApprovals = %v, %v", pend, err)
	}

	// A wrong admin token is reported, not hidden.
	raw, _ = json.Marshal(DaemonInfo{APIURL: h.url, AdminToken: "wrong", PID: 1})
	if err := os.WriteFile(p, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = NewClient(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListSessions(ctx); !errors.As(err, &ae) || ae.Status != 401 {
		t.Errorf("ListSessions with a wrong token = %v, want 401", err)
	}
}

package proxy

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/contract"
)

// curlEnv is the child environment: no inherited trust stores or proxies,
// so the session CA passed with --cacert is the only trust.
func curlEnv() []string {
	drop := map[string]bool{"SSL_CERT_FILE": true, "SSL_CERT_DIR": true, "CURL_CA_BUNDLE": true, "REQUESTS_CA_BUNDLE": true,
		"GIT_SSL_CAINFO": true, "NODE_EXTRA_CA_CERTS": true, "HTTP_PROXY": true, "HTTPS_PROXY": true, "ALL_PROXY": true,
		"NO_PROXY": true, "CURL_HOME": true}
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if drop[strings.ToUpper(k)] {
			continue
		}
		out = append(out, kv)
	}
	return append(out, "CURL_HOME=/nonexistent")
}

func TestCurl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("curl is required when CI=true")
		}
		t.Skip("curl not installed")
	}
	e := newEnv(t)
	tests := []struct {
		name      string
		args      []string
		url       string
		status    string
		version   string
		wantProto int
	}{
		{"http1.1 user in proxy url", []string{"--http1.1", "-x", "http://" + e.sess.ID + ":" + e.secret + "@" + e.addr},
			"https://api.example.test/repos/acme/widgets/issues", "200", "1.1", 1},
		{"http2 proxy-user", []string{"--http2", "-x", "http://" + e.addr, "--proxy-user", e.sess.ID + ":" + e.secret},
			"https://h2.example.test/repos/acme/widgets/issues", "200", "2", 2},
		{"denied path", []string{"--http2", "-x", "http://" + e.addr, "--proxy-user", e.sess.ID + ":" + e.secret},
			"https://api.example.test/admin", "403", "2", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			args := append([]string{"-sS", "--max-time", "20", "--cacert", e.caFile, "--noproxy", "",
				"-H", "Authorization: " + clientAuth, "-o", "-", "-w", "\n%{http_code} %{http_version}"}, tc.args...)
			cmd := exec.CommandContext(ctx, curl, append(args, tc.url)...)
			cmd.Env = curlEnv()
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("curl: %v: %s", err, stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if got, want := lines[len(lines)-1], tc.status+" "+tc.version; got != want {
				t.Fatalf("curl status/version = %q, want %q; output:\n%s", got, want, out)
			}
			if tc.wantProto == 0 {
				if !strings.Contains(string(out), string(contract.CodeOperationNotAllowed)) {
					t.Errorf("denial body lacks the code:\n%s", out)
				}
				e.expectNothingSeen(t)
				return
			}
			s := e.expectSeen(t)
			if s.Header.Get("Authorization") != "Bearer "+testToken {
				t.Errorf("upstream did not receive the injected credential")
			}
			if s.Proto != tc.wantProto {
				t.Errorf("upstream got HTTP/%d, want %d", s.Proto, tc.wantProto)
			}
		})
	}
}

package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoadConfigFileExample(t *testing.T) {
	var cfg Config
	if err := LoadConfigFile("../configs/aileron.example.jsonc", &cfg); err != nil {
		t.Fatalf("LoadConfigFile(example) = %v", err)
	}
	if cfg.ProxyListen != "127.0.0.1:3128" || cfg.APIListen != "127.0.0.1:7700" {
		t.Errorf("listen = %q, %q", cfg.ProxyListen, cfg.APIListen)
	}
	if cfg.ApprovalTimeout != 120*time.Second || cfg.ShutdownTimeout != 10*time.Second {
		t.Errorf("durations = %v, %v", cfg.ApprovalTimeout, cfg.ShutdownTimeout)
	}
	if cfg.Limits.MaxTunnelsPerSession != 256 || cfg.Limits.ResponseHeaderTimeout != 60*time.Second || cfg.Limits.MaxConcurrentStreams != 250 {
		t.Errorf("limits = %+v", cfg.Limits)
	}
}

func TestLoadConfigFileErrors(t *testing.T) {
	cases := []struct{ name, body, want string }{
		{"unknown key", `{"proxy_lisen": "x"}`, `unknown field "proxy_lisen"`},
		{"bad duration", `{"approval_timeout": "soon"}`, `approval_timeout: "soon" is not a positive duration`},
		{"bad resolve", `{"resolve": ["api.example.com=1.2.3.4:443"]}`, `is not HOST:PORT`},
		{"syntax", `{"proxy_listen": }`, `parsing config`},
		{"bad limit duration", `{"limits": {"idle_timeout": "forever"}}`, `limits.idle_timeout: "forever"`},
		{"unknown limit", `{"limits": {"max_tunnels": 3}}`, `unknown field "max_tunnels"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "config.json")
			if err := os.WriteFile(p, []byte(tc.body), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg := Config{ProxyListen: "keep"}
			err := LoadConfigFile(p, &cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("LoadConfigFile(%s) = %v, want error containing %q", tc.body, err, tc.want)
			}
		})
	}
}

func TestParseResolve(t *testing.T) {
	m, err := ParseResolve([]string{"API.Example.com:443=127.0.0.1:8443", "v6.example:8443=[::1]:9443"})
	if err != nil {
		t.Fatal(err)
	}
	if m["api.example.com:443"] != "127.0.0.1:8443" || m["v6.example:8443"] != "[::1]:9443" {
		t.Errorf("ParseResolve = %v", m)
	}
	for _, bad := range []string{"nohost", "a.example:0=1.2.3.4:1", "a.example:443=notanip:1", "a.example:443=1.2.3.4:99999"} {
		if _, err := ParseResolve([]string{bad}); err == nil {
			t.Errorf("ParseResolve(%q) = nil error, want one", bad)
		}
	}
}

func TestFingerprintChanges(t *testing.T) {
	dir := t.TempDir()
	a := fingerprint(dir, filepath.Join(dir, "missing.json"))
	if err := os.WriteFile(filepath.Join(dir, "x"), []byte("1"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := fingerprint(dir, filepath.Join(dir, "missing.json"))
	if a == b {
		t.Fatal("fingerprint did not change after a file was added")
	}
	if b != fingerprint(dir, filepath.Join(dir, "missing.json")) {
		t.Fatal("fingerprint is not stable")
	}
}

// TestFingerprintPackageDirs checks that a store's package directories are
// summarised without being entered, and that a package appearing, a file
// created in one and a package removed still change the fingerprint.
func TestFingerprintPackageDirs(t *testing.T) {
	root := t.TempDir()
	hashes := filepath.Join(root, "sha256")
	pkg := filepath.Join(hashes, strings.Repeat("ab", 32))
	if err := os.MkdirAll(pkg, 0o700); err != nil {
		t.Fatal(err)
	}
	if !isPackageDir(pkg) || isPackageDir(hashes) || isPackageDir(filepath.Join(root, strings.Repeat("ab", 32))) || isPackageDir(filepath.Join(hashes, strings.Repeat("AB", 32))) {
		t.Fatal("isPackageDir does not tell sha256/<hex> from other directories")
	}
	steps := []struct {
		name string
		do   func() error
	}{
		{"file created in a package", func() error {
			return os.WriteFile(filepath.Join(pkg, "aileron.connector.v1.json"), []byte("{}"), 0o600)
		}},
		{"package added", func() error { return os.Mkdir(filepath.Join(hashes, strings.Repeat("cd", 32)), 0o700) }},
		{"package removed", func() error { return os.RemoveAll(pkg) }},
	}
	last := fingerprint(root)
	for _, s := range steps {
		time.Sleep(10 * time.Millisecond) // a coarse file system clock still ticks
		if err := s.do(); err != nil {
			t.Fatal(err)
		}
		now := fingerprint(root)
		if now == last {
			t.Errorf("%s: fingerprint unchanged", s.name)
		}
		last = now
	}
}

// BenchmarkFingerprintStore is the reload poll's cost on a store of 1,000
// connector packages.
func BenchmarkFingerprintStore(b *testing.B) {
	root := b.TempDir()
	for i := range 1000 {
		dir := filepath.Join(root, "sha256", fmt.Sprintf("%064x", i))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "aileron.connector.v1.json"), []byte("{}"), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		fingerprint(root)
	}
}

func TestLoadConfigFileState(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.json")
	body := `{"state": "postgres://db.internal/aileron", "state_key_file": "/etc/aileron/state.key", "replica": "serve-0", "shutdown_sandboxes": true}`
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	var cfg Config
	if err := LoadConfigFile(p, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.StateURL != "postgres://db.internal/aileron" || cfg.StateKeyFile != "/etc/aileron/state.key" || cfg.Replica != "serve-0" || !cfg.ShutdownSandboxes {
		t.Errorf("state settings = %q %q %q %v", cfg.StateURL, cfg.StateKeyFile, cfg.Replica, cfg.ShutdownSandboxes)
	}
}

func TestReplicaDefaultsAndChecks(t *testing.T) {
	cfg, err := Config{Home: t.TempDir()}.withDefaults()
	host, _ := os.Hostname()
	if err != nil || cfg.Replica == "" || (host != "" && cfg.Replica != host) {
		t.Errorf("default replica = %q, %v; want the host name %q", cfg.Replica, err, host)
	}
	for _, bad := range []string{"serve 0", "a\nb", strings.Repeat("x", MaxReplicaBytes+1)} {
		if _, err := (Config{Home: "h", Replica: bad}).withDefaults(); err == nil || !strings.Contains(err.Error(), "--replica") {
			t.Errorf("replica %q: %v, want an error naming --replica", bad, err)
		}
	}
}

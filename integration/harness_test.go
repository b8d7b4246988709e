// Package integration holds end-to-end tests: the real aileron-proxy binary
// running `serve`, real TLS upstreams on loopback, and real clients (curl,
// Go's net/http, python3, BusyBox and GNU wget through generated shims).
package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// binPath is the aileron-proxy binary built once by TestMain.
var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "aileron-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "aileron-proxy")
	build := exec.Command("go", "build", "-o", binPath, "../cmd/aileron-proxy")
	// Static, as released: launch runs this binary as the sandbox's egress
	// guard inside a container (see launcher.GuardHelper).
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building aileron-proxy:", err)
		os.Exit(1)
	}
	code := m.Run()
	removeSharedImages()
	os.RemoveAll(dir)
	os.Exit(code)
}

// canary is the credential stored for the test connector. No test output,
// log, audit line or client-visible response may contain it.
const canary = "canary-SECRET-7f3a9c1e5b"

// upstream is a loopback TLS server standing in for a real API. It records
// what arrives so tests assert inside the upstream.
type upstream struct {
	*http.Server
	addr     string
	certPEM  []byte
	certFile string

	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	Method, Path, RawQuery, Host, Proto string
	Header                              http.Header
	Body                                []byte
}

func (u *upstream) record(r *http.Request, body []byte) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.reqs = append(u.reqs, recorded{r.Method, r.URL.Path, r.URL.RawQuery, r.Host, r.Proto, r.Header.Clone(), body})
}

func (u *upstream) requests() []recorded {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]recorded(nil), u.reqs...)
}

func (u *upstream) last(t *testing.T) recorded {
	t.Helper()
	r := u.requests()
	if len(r) == 0 {
		t.Fatal("the upstream received no request")
	}
	return r[len(r)-1]
}

// newUpstream starts an HTTPS server (HTTP/1.1 and h2) for names on
// 127.0.0.1 with handler h wrapped to record every request.
func newUpstream(t *testing.T, names []string, h http.Handler) *upstream {
	t.Helper()
	cert, certPEM := selfSigned(t, names)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{addr: ln.Addr().String(), certPEM: certPEM}
	u.certFile = filepath.Join(t.TempDir(), "upstream.pem")
	if err := os.WriteFile(u.certFile, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	u.Server = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var body []byte
			if r.ContentLength != 0 {
				body, _ = io.ReadAll(io.LimitReader(r.Body, 1<<20))
				// The handler reads the body too.
				r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), r.Body))
			}
			u.record(r, body)
			h.ServeHTTP(w, r)
		}),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}},
	}
	go u.ServeTLS(ln, "", "")
	t.Cleanup(func() { u.Close() })
	return u
}

func selfSigned(t *testing.T, names []string) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: names[0]},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              names,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	kd, _ := x509.MarshalECPrivateKey(key)
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return cert, certPEM
}

// daemon is a running `aileron-proxy serve` subprocess.
type daemon struct {
	home      string
	cmd       *exec.Cmd
	stderr    *lockedBuffer
	exited    chan error // receives cmd.Wait's result once
	stopped   bool       // stop was called; the cleanup has nothing to do
	APIURL    string     `json:"api_url"`
	ProxyAddr string     `json:"proxy_addr"`
	Admin     string     `json:"admin_token"`
	PID       int        `json:"pid"`
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// cli runs the binary with --home and returns stdout, stderr and the exit code.
func cli(t *testing.T, home string, stdin string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, append([]string{"--home", home}, args...)...)
	cmd.Env = testkit.CleanEnv()
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	code := exitCode(t, cmd.Run(), cmd.Args)
	return out.String(), errb.String(), code
}

// exitCode is the exit status behind err, the result of running a command
// with args; an error other than a non-zero exit fails the test.
func exitCode(t *testing.T, err error, args []string) int {
	t.Helper()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode()
	case err != nil:
		t.Fatalf("running %q: %v", args, err)
	}
	return 0
}

func mustCLI(t *testing.T, home, stdin string, args ...string) string {
	t.Helper()
	out, errOut, code := cli(t, home, stdin, args...)
	if code != 0 {
		t.Fatalf("aileron-proxy %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// startServe runs serve with extra flags and waits for daemon.json.
func startServe(t *testing.T, home string, env []string, flags ...string) *daemon {
	t.Helper()
	args := append([]string{"--home", home, "serve", "--proxy-listen", "127.0.0.1:0", "--api-listen", "127.0.0.1:0"}, flags...)
	cmd := exec.Command(binPath, args...)
	cmd.Env = testkit.CleanEnv(env...)
	d := &daemon{home: home, cmd: cmd, stderr: &lockedBuffer{}, exited: make(chan error, 1)}
	cmd.Stderr = d.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := d.exited
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if d.stopped {
			return
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("serve exited with %v after SIGTERM, want a clean exit", err)
			}
			if _, err := os.Stat(filepath.Join(home, "daemon.json")); !os.IsNotExist(err) {
				t.Errorf("daemon.json is still there after a clean shutdown (%v)", err)
			}
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("serve did not stop within 15s of SIGTERM")
		}
		if t.Failed() {
			t.Logf("serve stderr:\n%s", d.stderr.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		raw, err := os.ReadFile(filepath.Join(home, "daemon.json"))
		// The pid check skips a daemon.json a killed serve left behind.
		if err == nil && json.Unmarshal(raw, d) == nil && d.ProxyAddr != "" && d.PID == cmd.Process.Pid {
			return d
		}
		select {
		case err := <-exited:
			t.Fatalf("serve exited early: %v\n%s", err, d.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve wrote no daemon.json within 30s\n%s", d.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop sends sig to serve and returns how it exited (an error for a
// non-zero exit or a death by signal); the test's cleanup then leaves it
// alone.
func (d *daemon) stop(t *testing.T, sig syscall.Signal) error {
	t.Helper()
	d.stopped = true
	_ = d.cmd.Process.Signal(sig)
	select {
	case err := <-d.exited:
		return err
	case <-time.After(15 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
		t.Fatalf("serve did not stop within 15s of %s", sig)
		return nil
	}
}

// sessionInfo is the JSON of `session create --json`.
type sessionInfo struct {
	ID           string `json:"id"`
	APIToken     string `json:"api_token"`
	ProxyURL     string `json:"proxy_url"`
	CAPEM        string `json:"ca_pem"`
	CAFile       string `json:"ca_file"`
	CABundleFile string `json:"ca_bundle_file"`
	ExpiresAt    string `json:"expires_at"`
}

func createSession(t *testing.T, home string, args ...string) sessionInfo {
	t.Helper()
	return parseSession(t, mustCLI(t, home, "", append([]string{"session", "create", "--json"}, args...)...))
}

func parseSession(t *testing.T, out string) sessionInfo {
	t.Helper()
	var s sessionInfo
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("session create --json printed %q: %v", out, err)
	}
	if s.ProxyURL == "" || s.CAFile == "" {
		t.Fatalf("session create --json lacks proxy_url or ca_file: %s", out)
	}
	return s
}

// auditEvents reads every event in the daemon's audit log.
func auditEvents(t *testing.T, home string) []map[string]any {
	t.Helper()
	f, err := os.Open(filepath.Join(home, "audit", "audit.jsonl"))
	if err != nil {
		t.Fatalf("opening audit log: %v", err)
	}
	defer f.Close()
	var evs []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev map[string]any
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("audit line %q is not JSON: %v", sc.Text(), err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// waitAudit waits until an event matching all of want is in the audit log.
func waitAudit(t *testing.T, home string, want map[string]any) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, ev := range auditEvents(t, home) {
			ok := true
			for k, v := range want {
				if fmt.Sprint(ev[k]) != fmt.Sprint(v) {
					ok = false
					break
				}
			}
			if ok {
				return ev
			}
		}
		if time.Now().After(deadline) {
			raw, _ := os.ReadFile(filepath.Join(home, "audit", "audit.jsonl"))
			t.Fatalf("no audit event matching %v; audit log:\n%s", want, raw)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

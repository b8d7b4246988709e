package daemon

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/credentials"
	"github.com/aileron-dev/aileron-proxy/policy"
	"github.com/aileron-dev/aileron-proxy/state/memstore"
)

const replicaSpec = `{
  "schema_version": "aileron.connector.v1",
  "connector": {"fqn": "local://test/replicas", "version": "1.0.0"},
  "tools": [{"name": "t", "operations": [
    {"name": "items.list", "method": "GET", "path": "/v1/items", "hosts": ["api.example.test"], "credential": "bearer"},
    {"name": "items.send", "method": "POST", "path": "/v1/send", "hosts": ["api.example.test"], "credential": "bearer", "approval": "required"}
  ]}]
}`

const replicaSecret = "replica-canary-4b1d"

// tlsUpstream is a loopback HTTPS stand-in for api.example.test that
// records the Authorization header of each request.
type tlsUpstream struct {
	addr, certFile string
	mu             sync.Mutex
	auth           []string
}

func (u *tlsUpstream) seen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.auth...)
}

func newTLSUpstream(t *testing.T) *tlsUpstream {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "api.example.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"api.example.test"},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	u := &tlsUpstream{certFile: filepath.Join(t.TempDir(), "up.pem")}
	if err := os.WriteFile(u.certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.addr = ln.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.auth = append(u.auth, r.Header.Get("Authorization"))
		u.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"ok":true}`)
	}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return u
}

// startReplica runs a daemon named replica on its own home with the test
// connector and credential, sharing st.
func startReplica(t *testing.T, replica string, st *memstore.Store, up *tlsUpstream) *Daemon {
	t.Helper()
	home := t.TempDir()
	store, err := policy.OpenStore(home)
	if err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(t.TempDir(), policy.SpecFileName)
	if err := os.WriteFile(spec, []byte(replicaSpec), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Install(spec, policy.InstallOptions{}); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte(replicaSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	var f credentials.File
	f.Set(credentials.Binding{FQN: "local://test/replicas", Kind: credentials.KindBearer, Source: credentials.Source{Type: credentials.SourceFile, Ref: secret}})
	if err := f.Save(filepath.Join(home, CredentialsFile)); err != nil {
		t.Fatal(err)
	}
	d, err := New(Config{Home: home, ProxyListen: "127.0.0.1:0", APIListen: "127.0.0.1:0", Replica: replica, Store: st,
		Resolve: map[string]string{"api.example.test:443": up.addr}, UpstreamCAFiles: []string{up.certFile},
		ApprovalTimeout: 20 * time.Second}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("replica %s: Run = %v", replica, err)
		}
	})
	return d
}

// call makes an API request with token and decodes the JSON answer.
func call(t *testing.T, method, u, token, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, u, err)
		return 0, nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var v map[string]any
	_ = json.Unmarshal(raw, &v)
	return resp.StatusCode, v
}

// viaProxy GETs the upstream through proxyAddr as the session.
func viaProxy(id, secret, caPEM, proxyAddr string) (int, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(caPEM))
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", User: url.UserPassword(id, secret), Host: proxyAddr}),
		TLSClientConfig: &tls.Config{RootCAs: pool}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://api.example.test/v1/items")
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// Two daemons sharing one store: a session created through A works
// through B's proxy, an approval held on A is decided through B's API, and
// a session ended through B is refused by A's proxy within a second.
func TestReplicasShareSessionsAndApprovals(t *testing.T) {
	st := memstore.New()
	up := newTLSUpstream(t)
	a := startReplica(t, "a", st, up)
	b := startReplica(t, "b", st.Shared(), up)

	code, s := call(t, http.MethodPost, a.APIURL()+"/v1/sessions", a.adminToken, `{}`)
	if code != http.StatusCreated {
		t.Fatalf("create on A = %d %v", code, s)
	}
	id, token, caPEM := s["id"].(string), s["api_token"].(string), s["ca_pem"].(string)
	pu, err := url.Parse(s["proxy_url"].(string))
	if err != nil {
		t.Fatal(err)
	}
	secret, _ := pu.User.Password()

	// Through B's proxy, with A's proxy credential and CA.
	if code, err := viaProxy(id, secret, caPEM, b.ProxyAddr()); err != nil || code != 200 {
		t.Fatalf("GET through B's proxy = %d, %v", code, err)
	}
	if got := up.seen(); len(got) != 1 || got[0] != "Bearer "+replicaSecret {
		t.Fatalf("upstream saw %d requests, want 1 with the injected credential", len(got))
	}
	if code, v := call(t, http.MethodPost, b.APIURL()+"/v1/connector-operations/run", token,
		`{"connector_fqn":"local://test/replicas","tool":"t","operation":"items.list","args":{}}`); code != 200 {
		t.Fatalf("run on B with A's session token = %d %v", code, v)
	}

	// Held on A, decided through B.
	held := make(chan int, 1)
	go func() {
		code, _ := call(t, http.MethodPost, a.APIURL()+"/v1/connector-operations/run", token,
			`{"connector_fqn":"local://test/replicas","tool":"t","operation":"items.send","args":{}}`)
		held <- code
	}()
	var apr string
	deadline := time.Now().Add(10 * time.Second)
	for apr == "" && time.Now().Before(deadline) {
		_, v := call(t, http.MethodGet, b.APIURL()+"/v1/approvals", b.adminToken, "")
		if list, _ := v["approvals"].([]any); len(list) == 1 {
			apr, _ = list[0].(map[string]any)["id"].(string)
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if apr == "" {
		t.Fatal("B never listed the approval held on A")
	}
	start := time.Now()
	if code, v := call(t, http.MethodPost, b.APIURL()+"/v1/approvals/"+apr, b.adminToken, `{"decision":"approve"}`); code != 200 {
		t.Fatalf("decide on B = %d %v", code, v)
	}
	select {
	case code := <-held:
		if code != 200 {
			t.Fatalf("A's held call = %d after B approved it", code)
		}
		t.Logf("A released the call %s after B's decision", time.Since(start).Round(time.Millisecond))
	case <-time.After(time.Second):
		t.Fatal("A did not release the call within 1s of B's decision")
	}
	if code, _ := call(t, http.MethodPost, a.APIURL()+"/v1/approvals/"+apr, a.adminToken, `{"decision":"deny"}`); code != http.StatusConflict {
		t.Errorf("deciding it again on A = %d, want 409", code)
	}

	// Ended through B, refused by A.
	if code, _ := viaProxy(id, secret, caPEM, a.ProxyAddr()); code != 200 {
		t.Fatalf("A's proxy before the end = %d", code)
	}
	if code, v := call(t, http.MethodDelete, b.APIURL()+"/v1/sessions/"+id, b.adminToken, ""); code >= 300 {
		t.Fatalf("end on B = %d %v", code, v)
	}
	start = time.Now()
	for {
		code, err := viaProxy(id, secret, caPEM, a.ProxyAddr())
		if err != nil || code != 200 {
			t.Logf("A refuses the session %s after B ended it (%d, %v)", time.Since(start).Round(time.Millisecond), code, err)
			break
		}
		if time.Since(start) > time.Second {
			t.Fatal("A still serves the session 1s after B ended it")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, _ := call(t, http.MethodPost, a.APIURL()+"/v1/connector-operations/run", token,
		`{"connector_fqn":"local://test/replicas","tool":"t","operation":"items.list","args":{}}`); code != http.StatusUnauthorized {
		t.Errorf("A's API with the ended session's token = %d, want 401", code)
	}
}

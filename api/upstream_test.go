package api

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/ca"
)

// upstreamReq is what the upstream saw of one request.
type upstreamReq struct {
	Method, Path, RawPath, RawQuery, Host, Auth, Internal, Body, ContentType string
}

// upstream is a loopback TLS server standing for the connector APIs. It
// counts every request it receives.
type upstream struct {
	srv   *httptest.Server
	ca    *ca.Authority
	count atomic.Int64
	mu    sync.Mutex
	reqs  []upstreamReq
	// flaky counts requests to /flaky/*; the first of each is cut off.
	flaky atomic.Int64
}

func newUpstream(t *testing.T) *upstream {
	t.Helper()
	auth, err := ca.New(ca.Config{Hosts: []string{hostGH, hostOth}, Validity: time.Hour})
	if err != nil {
		t.Fatalf("ca.New for the upstream: %v", err)
	}
	u := &upstream{ca: auth}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(u.serve))
	u.srv.EnableHTTP2 = true
	u.srv.TLS = &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			return auth.Leaf(hello.ServerName)
		},
	}
	u.srv.StartTLS()
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) requests() []upstreamReq {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.reqs)
}

func (u *upstream) last(t *testing.T) upstreamReq {
	t.Helper()
	r := u.requests()
	if len(r) == 0 {
		t.Fatal("the upstream received no request")
	}
	return r[len(r)-1]
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	u.count.Add(1)
	body, _ := io.ReadAll(r.Body)
	rec := upstreamReq{
		Method: r.Method, Path: r.URL.Path, RawPath: r.URL.EscapedPath(), RawQuery: r.URL.RawQuery, Host: r.Host,
		Auth: r.Header.Get("Authorization"), Internal: r.Header.Get(HeaderInternal) + r.Header.Get(HeaderSource) + r.Header.Get(HeaderAuditArgs),
		Body: string(body), ContentType: r.Header.Get("Content-Type"),
	}
	u.mu.Lock()
	u.reqs = append(u.reqs, rec)
	u.mu.Unlock()

	switch {
	case strings.HasPrefix(r.URL.Path, "/flaky/"):
		if u.flaky.Add(1) == 1 {
			// Cut the connection before any response byte.
			hj, ok := w.(http.Hijacker)
			if !ok {
				panic(http.ErrAbortHandler)
			}
			conn, _, err := hj.Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"ok":true}`)
	case r.URL.Path == "/big":
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write(bytes.Repeat([]byte("x"), smallResponses+1))
	case r.URL.Path == "/bin":
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write([]byte{0xff, 0xfe, 0x00, 0x01})
	case r.URL.Path == "/text":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("X-Ratelimit-Remaining", "42")
		w.Header().Set("Set-Cookie", "session=abc")
		w.Header().Set("X-Internal-Trace", "t-1")
		fmt.Fprint(w, "héllo")
	default:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Link", `<https://api.test.example/next>; rel="next"`)
		status := http.StatusOK
		if r.Method == http.MethodPost {
			status = http.StatusCreated
		}
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{
			"method": r.Method, "path": r.URL.Path, "query": r.URL.RawQuery, "body": string(body),
			// Echo the credential: the proxy must scrub it.
			"auth": r.Header.Get("Authorization"),
		})
	}
}

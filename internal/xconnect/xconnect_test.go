package xconnect_test

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"golang.org/x/net/http2"

	"github.com/aileron-dev/aileron-proxy/internal/xconnect"
)

// TestExtendedConnectEnabled proves the init order this package relies on:
// in a binary that imports it and net/http, the HTTP/2 server accepts an
// extended CONNECT.
func TestExtendedConnectEnabled(t *testing.T) {
	if v := os.Getenv("GODEBUG"); !strings.Contains(v, xconnect.Setting) {
		t.Skipf("GODEBUG=%q chooses http2xconnect itself", v)
	}
	got := make(chan string, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Method + " " + r.Header.Get(":protocol")
		w.WriteHeader(http.StatusOK)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	tc, err := tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{RootCAs: rootsOf(srv), NextProtos: []string{"h2"}, ServerName: "example.com"})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	cc, err := (&http2.Transport{}).NewClientConn(tc)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodConnect, "https://example.com/ws", http.NoBody)
	req.Header.Set(":protocol", "websocket")
	resp, err := cc.RoundTrip(req)
	if err != nil {
		t.Fatalf("extended CONNECT refused (GODEBUG=%q): %v", os.Getenv("GODEBUG"), err)
	}
	resp.Body.Close()
	if m := <-got; m != "CONNECT websocket" || resp.StatusCode != http.StatusOK {
		t.Fatalf("server saw %q, answered %d", m, resp.StatusCode)
	}
}

func rootsOf(s *httptest.Server) *x509.CertPool {
	return s.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
}

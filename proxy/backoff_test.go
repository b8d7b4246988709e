package proxy

import (
	"bufio"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/contract"
	"github.com/aileron-dev/aileron-proxy/session"
)

// connectFrom sends CONNECT with the credential id:secret from localIP and
// returns the response.
func connectFrom(t testing.TB, e *env, localIP, id, secret string) *http.Response {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(localIP)}}
	c, err := d.Dial("tcp", e.addr)
	if err != nil {
		t.Fatalf("dialing the proxy from %s: %v", localIP, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	cred := base64.StdEncoding.EncodeToString([]byte(id + ":" + secret))
	if _, err := io.WriteString(c, "CONNECT "+apiHost+":443 HTTP/1.1\r\nHost: "+apiHost+":443\r\nProxy-Authorization: Basic "+cred+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("reading the CONNECT response: %v", err)
	}
	if resp.StatusCode != http.StatusOK { // a tunnel's body is the tunnel
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	return resp
}

// TestProxyAuthBackoff is the adversarial run's brute force: 2,000 wrong
// Proxy-Authorization attempts as fast as possible. Past a small burst they
// are throttled (429 with Retry-After, not checked), counted in the metrics
// and audited once; a correct credential from another source, or for
// another session, works at once.
func TestProxyAuthBackoff(t *testing.T) {
	e := newEnv(t)
	other, otherSecrets, err := e.sessions.Create(session.CreateOptions{Snapshot: e.srv.cfg.Policy(), TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	const attempts = 2000
	var n407, n429, bad atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < attempts/8; i++ {
				resp := connectFrom(t, e, "127.0.0.1", e.sess.ID, "wrong-secret-"+strconv.Itoa(i))
				switch resp.StatusCode {
				case http.StatusProxyAuthRequired:
					n407.Add(1)
				case http.StatusTooManyRequests:
					n429.Add(1)
					if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || s < 1 {
						bad.Add(1)
					}
				default:
					bad.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if bad.Load() != 0 {
		t.Fatalf("%d attempts got neither 407 nor 429 with a Retry-After", bad.Load())
	}
	// The burst plus what the refill allows over the run, with slack.
	maxChecked := int64(DefaultAuthFailureBurst + DefaultAuthFailureRate*(elapsed.Seconds()+1))
	t.Logf("%d attempts in %v: %d got 407, %d got 429", attempts, elapsed, n407.Load(), n429.Load())
	if n407.Load() > maxChecked || n429.Load() == 0 {
		t.Fatalf("%d wrong credentials were checked (407) and %d throttled; want at most %d checked", n407.Load(), n429.Load(), maxChecked)
	}
	if got := e.metric(t, "aileron_proxy_decisions_total", map[string]string{"result": "deny", "reason": string(contract.CodeAuthThrottled)}); got != float64(n429.Load()) {
		t.Errorf("throttled decisions metric = %v, want %d", got, n429.Load())
	}
	throttled := 0
	for _, ev := range e.audit.All() {
		if ev.Reason == string(contract.CodeAuthThrottled) {
			throttled++
		}
	}
	if throttled != 1 {
		t.Errorf("%d auth_throttled audit events, want 1 for the burst", throttled)
	}

	// The attacker's source is throttled even with the right secret...
	if resp := connectFrom(t, e, "127.0.0.1", e.sess.ID, e.secret); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("right secret from the throttled source = %d, want 429", resp.StatusCode)
	}
	// ...but not another source, nor another session from the same source.
	if resp := connectFrom(t, e, "127.0.0.2", e.sess.ID, e.secret); resp.StatusCode != http.StatusOK {
		t.Errorf("right secret from another source = %d, want 200", resp.StatusCode)
	}
	if resp := connectFrom(t, e, "127.0.0.1", other.ID, otherSecrets.ProxySecret); resp.StatusCode == http.StatusTooManyRequests {
		t.Errorf("another session's credential from the same source = %d, want it checked", resp.StatusCode)
	}
	// Once the source waits, it is checked again.
	e.clock.Add(int64(3 * time.Second))
	if resp := connectFrom(t, e, "127.0.0.1", e.sess.ID, e.secret); resp.StatusCode != http.StatusOK {
		t.Errorf("right secret after the backoff = %d, want 200", resp.StatusCode)
	}
}

func TestAuthBackoffBucket(t *testing.T) {
	now := time.Unix(0, 0)
	b := NewAuthBackoff(2, 3, func() time.Time { return now })
	for i := 0; i < 3; i++ {
		if th, _ := b.Throttled("a", "s"); th {
			t.Fatalf("failure %d: throttled within the burst", i)
		}
		if started := b.Fail("a", "s"); started != (i == 2) {
			t.Fatalf("failure %d: burst started = %v", i, started)
		}
	}
	th, wait := b.Throttled("a", "s")
	if !th || wait != 500*time.Millisecond {
		t.Fatalf("after the burst: Throttled = %v, %v; want true, 500ms", th, wait)
	}
	if th, _ := b.Throttled("b", "s"); th {
		t.Error("another source is throttled")
	}
	if th, _ := b.Throttled("a", "t"); th {
		t.Error("another session ID from the same source is throttled")
	}
	now = now.Add(500 * time.Millisecond)
	if th, _ := b.Throttled("a", "s"); th {
		t.Error("still throttled after the refill")
	}
	if b.Fail("a", "s") {
		t.Error("a second failure in the same burst is reported again")
	}
	now = now.Add(10 * time.Second) // refilled: the burst is over
	b.Fail("a", "s")
	b.Fail("a", "s")
	if !b.Fail("a", "s") {
		t.Error("a new burst after a full refill is not reported")
	}
}

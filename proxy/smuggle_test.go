package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/aileron-dev/aileron-proxy/internal/contract"
)

// smuggled is the request a sender hides in a body; policy allows it, so
// only framing can keep it from the upstream.
const smuggled = "GET /user?smuggled=1 HTTP/1.1\r\nHost: " + apiHost + "\r\n\r\n"

// post starts a POST the policy allows; the caller adds framing headers.
const post = "POST /repos/a/b/issues HTTP/1.1\r\nHost: " + apiHost + "\r\n"

// probe is sent after a case that must leave the connection usable; its
// 200 shows that the proxy still agrees with the client on boundaries.
const probe = "GET /public HTTP/1.1\r\nHost: " + apiHost + "\r\n\r\n"

func chunked(data string) string { return fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(data), data) }

// TestRequestSmugglingHTTP1 sends each case as raw bytes in one write inside
// an intercepted tunnel and checks the statuses, whether the proxy closed
// the connection, and exactly what the upstream received.
func TestRequestSmugglingHTTP1(t *testing.T) {
	e := newEnv(t)
	cl := func(n int) string { return fmt.Sprintf("Content-Length: %d\r\n", n) }
	tests := []struct {
		name   string
		raw    string
		status []int
		closed bool     // the proxy closes after the last response
		seen   []string // "METHOD URI" the upstream receives, in order
	}{
		{name: "CL.TE", raw: post + cl(5) + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled,
			status: []int{400}, closed: true},
		{name: "CL.TE tab before chunked", raw: post + cl(5) + "Transfer-Encoding:\tchunked\r\n\r\n0\r\n\r\n" + smuggled,
			status: []int{400}, closed: true},
		{name: "CL.TE lower-case names", raw: post + "content-length: 5\r\ntransfer-encoding: CHUNKED\r\n\r\n0\r\n\r\n" + smuggled,
			status: []int{400}, closed: true},
		{name: "TE.CL", raw: post + "Transfer-Encoding: chunked\r\n" + cl(3) + "\r\n" + chunked(smuggled),
			status: []int{400}, closed: true},
		{name: "obfuscated TE with CL", raw: post + cl(5) + "Transfer-Encoding: xchunked\r\n\r\nhello" + smuggled,
			status: []int{501}, closed: true},
		{name: "TE list with CL", raw: post + cl(5) + "Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n" + smuggled,
			status: []int{501}, closed: true},
		{name: "duplicate TE with CL", raw: post + cl(5) + "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n" + smuggled,
			status: []int{501}, closed: true},
		{name: "space before colon", raw: post + cl(5) + "Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n" + smuggled,
			status: []int{400}, closed: true},
		{name: "obfuscated TE alone", raw: post + "Transfer-Encoding: xchunked\r\n\r\n" + smuggled,
			status: []int{501}, closed: true},
		{name: "HTTP/1.0 with TE", raw: strings.Replace(post, "HTTP/1.1", "HTTP/1.0", 1) + "Transfer-Encoding: chunked\r\n\r\n" + chunked(smuggled),
			status: []int{400}, closed: true},
		{name: "duplicate CL differing", raw: post + cl(0) + cl(len(smuggled)) + "\r\n" + smuggled,
			status: []int{400}, closed: true},
		{name: "duplicate CL equal", raw: post + cl(5) + cl(5) + "\r\nhello",
			status: []int{200}, seen: []string{"POST /repos/a/b/issues"}},
		{name: "signed CL plus", raw: post + "Content-Length: +5\r\n\r\nhello" + smuggled,
			status: []int{400}, closed: true},
		{name: "signed CL minus", raw: post + "Content-Length: -5\r\n\r\nhello" + smuggled,
			status: []int{400}, closed: true},
		{name: "obs-fold hides TE", raw: post + "X-Fold: a\r\n Transfer-Encoding: chunked\r\n" + cl(5) + "\r\nhello",
			status: []int{400}, closed: true},
		{name: "obs-fold on TE", raw: post + "Transfer-Encoding: chunked\r\n identity\r\n\r\n" + chunked(smuggled),
			status: []int{501}, closed: true},
		{name: "bare LF", raw: "GET /user HTTP/1.1\nHost: " + apiHost + "\n\n",
			status: []int{400}, closed: true},
		{name: "bare LF hides CL", raw: post + "X-A: b\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled,
			status: []int{400}, closed: true},
		{name: "pipelined", raw: "GET /user HTTP/1.1\r\nHost: " + apiHost + "\r\n\r\n" + post + cl(5) + "\r\nhello" + probe,
			status: []int{200, 200, 200}, seen: []string{"GET /user", "POST /repos/a/b/issues", "GET /public"}},
		{name: "request inside a CL body", raw: post + cl(len(smuggled)) + "\r\n" + smuggled,
			status: []int{200}, seen: []string{"POST /repos/a/b/issues"}},
		{name: "request inside a chunked body", raw: post + "Transfer-Encoding: chunked\r\n\r\n" + chunked(smuggled),
			status: []int{200}, seen: []string{"POST /repos/a/b/issues"}},
		{name: "chunked body with extension and trailer", raw: post + "Transfer-Encoding: chunked\r\n\r\n" +
			"5;name=x\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n",
			status: []int{200}, seen: []string{"POST /repos/a/b/issues"}},
		{name: "stray CRLF after a POST", raw: post + cl(5) + "\r\nhello\r\n" + probe,
			status: []int{200, 200}, seen: []string{"POST /repos/a/b/issues", "GET /public"}},
		{name: "CL.TE pipelined after a good request", raw: "GET /user HTTP/1.1\r\nHost: " + apiHost + "\r\n\r\n" +
			post + cl(5) + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled,
			status: []int{200, 400}, closed: true, seen: []string{"GET /user"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conn, br := e.rawTunnel(t, apiHost+":443")
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(conn, tc.raw); err != nil {
				t.Fatalf("writing: %v", err)
			}
			var got []int
			for range tc.status {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("after statuses %v: reading a response: %v", got, err)
				}
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				got = append(got, resp.StatusCode)
				if resp.StatusCode == http.StatusBadRequest && resp.Header.Get("Content-Type") == contentTypeJSON {
					if d := errorOf(t, body); d.Code != contract.CodeBadFraming {
						t.Errorf("400 code = %q, want %q", d.Code, string(contract.CodeBadFraming))
					}
				}
			}
			if !slices.Equal(got, tc.status) {
				t.Fatalf("statuses = %v, want %v", got, tc.status)
			}
			if tc.closed {
				if b, err := br.ReadByte(); err == nil || isTimeout(err) {
					t.Fatalf("the connection stays open after the last response (read %q, %v); it must be closed", b, err)
				}
			} else {
				resp, body := rawRequest(t, conn, br, probe)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("probe after the case = %d %s, want 200: the connection lost its framing", resp.StatusCode, body)
				}
				tc.seen = append(slices.Clone(tc.seen), "GET /public")
			}
			if got := drainSeen(e); !slices.Equal(got, tc.seen) {
				t.Errorf("upstream received %q, want %q", got, tc.seen)
			}
		})
	}
}

// drainSeen returns what the upstream has received so far.
func drainSeen(e *env) []string {
	var out []string
	for {
		select {
		case s := <-e.seen:
			out = append(out, s.Method+" "+strings.SplitN(s.RequestURI, "?", 2)[0])
			if strings.Contains(s.RequestURI, "smuggled") {
				e.t.Errorf("the upstream received the smuggled request %s %s", s.Method, s.RequestURI)
			}
		case <-time.After(200 * time.Millisecond):
			return out
		}
	}
}

// TestRequestSmugglingHTTP2 sends raw HEADERS frames: HTTP/2 forbids
// Transfer-Encoding and other connection-specific fields, so the stream is
// refused before the handler; a body that holds a request stays one request.
func TestRequestSmugglingHTTP2(t *testing.T) {
	e := newEnv(t)
	base := [][2]string{{":method", "POST"}, {":scheme", "https"}, {":authority", apiHost}, {":path", "/repos/a/b/issues"}}
	tests := []struct {
		name    string
		fields  [][2]string
		body    string
		refused bool
		seen    []string
	}{
		{name: "TE chunked", fields: [][2]string{{"transfer-encoding", "chunked"}}, body: chunked(smuggled), refused: true},
		{name: "CL and TE", fields: [][2]string{{"content-length", "5"}, {"transfer-encoding", "chunked"}}, body: "0\r\n\r\n", refused: true},
		{name: "TE tab chunked", fields: [][2]string{{"transfer-encoding", "\tchunked"}}, body: "0\r\n\r\n", refused: true},
		{name: "connection header", fields: [][2]string{{"connection", "keep-alive"}}, refused: true},
		{name: "request inside the body", fields: [][2]string{{"content-length", fmt.Sprint(len(smuggled))}}, body: smuggled,
			seen: []string{"POST /repos/a/b/issues"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conn, br := e.rawTunnel(t, apiHost+":443", "h2")
			if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
				t.Fatalf("ALPN = %q, want h2", p)
			}
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			outcome := h2Exchange(t, conn, br, append(slices.Clone(base), tc.fields...), tc.body)
			if tc.refused {
				if outcome != "RST_STREAM PROTOCOL_ERROR" && outcome != "status 400" {
					t.Errorf("outcome = %s, want the stream refused", outcome)
				}
			} else if outcome != "status 200" {
				t.Errorf("outcome = %s, want status 200", outcome)
			}
			if got := drainSeen(e); !slices.Equal(got, tc.seen) {
				t.Errorf("upstream received %q, want %q", got, tc.seen)
			}
		})
	}
}

// h2Exchange sends one request on stream 1 with hand-made frames and
// reports how the server answered it.
func h2Exchange(t *testing.T, conn net.Conn, br *bufio.Reader, fields [][2]string, body string) string {
	t.Helper()
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, br)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range fields {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(),
		EndHeaders: true, EndStream: body == ""}); err != nil {
		t.Fatal(err)
	}
	if body != "" {
		if err := fr.WriteData(1, true, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	dec := hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return "read error: " + err.Error()
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == 1 {
				return "RST_STREAM " + f.ErrCode.String()
			}
		case *http2.GoAwayFrame:
			return "GOAWAY " + f.ErrCode.String()
		case *http2.HeadersFrame:
			if f.StreamID != 1 {
				continue
			}
			hf, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				return "bad HEADERS: " + err.Error()
			}
			for _, h := range hf {
				if h.Name == ":status" {
					return "status " + h.Value
				}
			}
		}
	}
}

// scanAll runs a framedConn's scanner over raw, split into pieces of at
// most step bytes, and returns the records it queued.
func scanAll(raw []byte, step int) ([]frameRecord, int) {
	fc := newFramedConn(nil, nil)
	for len(raw) > 0 {
		n := min(step, len(raw))
		if fc.state != frameLost {
			fc.scan(raw[:n])
		}
		raw = raw[n:]
	}
	return fc.queue, fc.state
}

// FuzzFramedConn checks that framing does not depend on how reads split
// the stream, and never panics.
func FuzzFramedConn(f *testing.F) {
	for _, s := range []string{
		post + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled,
		post + "Transfer-Encoding: chunked\r\n\r\n" + chunked(smuggled) + probe,
		post + "Content-Length: 5\r\n\r\nhello\r\n" + probe,
		"GET /user HTTP/1.1\nHost: a\n\n",
		post + "X: a\r\n b\r\n\r\n",
		post + "Transfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nT: 1\r\n\r\n" + probe,
	} {
		f.Add([]byte(s), uint8(1))
	}
	f.Fuzz(func(t *testing.T, raw []byte, step uint8) {
		whole, wholeState := scanAll(raw, len(raw)+1)
		split, splitState := scanAll(raw, int(step)%7+1)
		if !slices.Equal(whole, split) || wholeState != splitState {
			t.Fatalf("split reads give %+v (state %d), one read %+v (state %d)", split, splitState, whole, wholeState)
		}
	})
}

// BenchmarkFramedConnScan is the scanner's cost per request: a typical
// header block and a small JSON body.
func BenchmarkFramedConnScan(b *testing.B) {
	raw := []byte(post + "User-Agent: curl/8.5.0\r\nAccept: application/json\r\nAuthorization: Bearer x\r\n" +
		"Content-Type: application/json\r\nContent-Length: 17\r\n\r\n{\"title\":\"hello\"}")
	fc := newFramedConn(nil, nil)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		fc.scan(raw)
		if _, ok := fc.next(); !ok {
			b.Fatal("no record")
		}
	}
}

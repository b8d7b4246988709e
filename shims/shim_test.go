package shims

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// These tests run real shims under dash + GNU wget and BusyBox sh + BusyBox
// wget against runEmulator, a loopback stand-in for the daemon's
// POST /v1/connector-operations/run that follows the contract of issue 4
// plus the shim protocol of docs/shims.md (X-Aileron-Output: body and the
// X-Aileron-Upstream-Status / X-Aileron-Audit-Id headers). End-to-end tests
// of the shims against a real `aileron-proxy serve` belong to the
// integration package.

const (
	emuToken   = "tok-Secret-123"
	emuSession = "sess-42"
	emuFQN     = "local://test/aileron-connector-emu"
	emuAuditID = "aud-7"
)

// emuConnector declares one operation per behaviour of the emulator.
func emuConnector() policy.Connector {
	ops := []string{"echo", "created", "missing", "invalid", "denied", "forbidden", "gone", "broken", "drop", "approval", "legacy"}
	t := policy.Tool{Name: "Emu", Description: "emulator tool"}
	for _, op := range ops {
		t.Operations = append(t.Operations, policy.Operation{
			Name: op, Method: "POST", Path: "/" + op, Hosts: []string{"api.example.com"},
			Idempotency: policy.NotIdempotent,
			Inputs:      []policy.Input{{Name: "s", Type: policy.InputString}},
		})
	}
	return fakeConnector(emuFQN, t)
}

type runRequest struct {
	ConnectorFQN string          `json:"connector_fqn"`
	Tool         string          `json:"tool"`
	Operation    string          `json:"operation"`
	Args         json.RawMessage `json:"args"`
	APIToken     string          `json:"api_token"` // BusyBox shims, which send no Authorization
}

// emuCall is what the emulator saw of one request.
type emuCall struct {
	header http.Header
	body   []byte
	req    runRequest
}

type runEmulator struct {
	mu    sync.Mutex
	calls []emuCall
	// argvWithToken lists the command lines, read from /proc while a
	// request was being served, that held the token.
	argvWithToken []string
	// clientArgvSeen is set when a command line holding the run URL (the
	// waiting wget's) was among them: proof that the scan can see wget.
	clientArgvSeen bool
	// arrived receives once per request to the "approval" operation, which
	// is then held until release is closed (like a pending approval).
	arrived chan struct{}
	release chan struct{}
}

func newRunEmulator(t *testing.T) (*runEmulator, *httptest.Server) {
	e := &runEmulator{arrived: make(chan struct{}, 4), release: make(chan struct{})}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return e, srv
}

func (e *runEmulator) snapshot() []emuCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]emuCall(nil), e.calls...)
}

// last returns the latest request the emulator saw.
func (e *runEmulator) last(t *testing.T) emuCall {
	t.Helper()
	calls := e.snapshot()
	if len(calls) == 0 {
		t.Fatal("the emulator saw no request")
	}
	return calls[len(calls)-1]
}

func apiError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

func (e *runEmulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	call := emuCall{header: r.Header.Clone(), body: body}
	_ = json.Unmarshal(body, &call.req)
	leaks := argvHolding(emuToken) // the client is waiting for this reply
	client := len(argvHolding(RunPath)) > 0
	e.mu.Lock()
	e.calls = append(e.calls, call)
	e.argvWithToken = append(e.argvWithToken, leaks...)
	e.clientArgvSeen = e.clientArgvSeen || client
	e.mu.Unlock()
	auth := r.Header.Get("Authorization")

	switch {
	case r.Method != http.MethodPost || r.URL.Path != "/v1"+RunPath:
		apiError(w, http.StatusNotFound, "not_found", "no route "+r.Method+" "+r.URL.Path)
		return
	case auth != "Bearer "+emuToken && (auth != "" || call.req.APIToken != emuToken):
		apiError(w, http.StatusUnauthorized, "unauthorized", "missing or invalid session token")
		return
	case r.Header.Get(HeaderSessionID) != "" && r.Header.Get(HeaderSessionID) != emuSession:
		apiError(w, http.StatusForbidden, "session_mismatch", "X-Aileron-Session-Id does not match the token's session")
		return
	case r.Header.Get("Content-Type") != "application/json":
		apiError(w, http.StatusUnsupportedMediaType, "invalid_body", "send application/json")
		return
	}
	var req runRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.ConnectorFQN == "" || req.Tool == "" || req.Operation == "" || len(req.Args) == 0 || req.Args[0] != '{' {
		apiError(w, http.StatusBadRequest, "invalid_body", fmt.Sprintf("the body must be {\"connector_fqn\",\"tool\",\"operation\",\"args\":{...}}: %v", err))
		return
	}
	if req.ConnectorFQN != emuFQN || req.Tool != "Emu" {
		apiError(w, http.StatusNotFound, "connector_operation_not_found", "no such connector or tool")
		return
	}

	// upstream answers as if the operation reached the upstream.
	upstream := func(status int, ctype string, raw []byte) {
		w.Header().Set(HeaderUpstreamStatus, fmt.Sprint(status))
		w.Header().Set(HeaderAuditID, emuAuditID)
		if r.Header.Get(HeaderOutput) == OutputBody {
			w.Header().Set("Content-Type", ctype)
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(raw)
			return
		}
		env := map[string]any{"status": "proxied", "audit_id": emuAuditID, "upstream_status": status, "content_type": ctype, "headers": map[string]string{"content-type": ctype}}
		if strings.HasPrefix(ctype, "application/json") {
			env["body"] = json.RawMessage(raw)
		} else {
			env["body"] = string(raw)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(env)
	}

	switch req.Operation {
	case "echo":
		upstream(http.StatusOK, "application/json", req.Args)
	case "created":
		upstream(http.StatusCreated, "text/plain", []byte("created\n"))
	case "missing":
		upstream(http.StatusNotFound, "application/json", []byte(`{"message":"Not Found"}`))
	case "invalid":
		apiError(w, http.StatusBadRequest, "invalid_args", `args.s: want a string, got 1.5; args.bogus: unknown input, "emu invalid" takes s`)
	case "denied":
		apiError(w, http.StatusForbidden, "approval_denied", "a person denied emu denied <call 1> & more")
	case "forbidden":
		apiError(w, http.StatusForbidden, "operation_not_allowed", "POST /x is not an operation of this session")
	case "gone":
		apiError(w, http.StatusNotFound, "connector_operation_not_found", `tool "Emu" has no operation "gone"; it offers: echo`)
	case "broken":
		apiError(w, http.StatusBadGateway, "upstream_unreachable", "dialing api.example.com:443: connection refused")
	case "drop":
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
			}
		}
	case "approval":
		e.arrived <- struct{}{}
		select {
		case <-e.release:
			upstream(http.StatusOK, "application/json", []byte(`{"sent":true}`))
		case <-r.Context().Done():
		}
	case "legacy":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"proxied","upstream_status":200,"body":{}}`)
	default:
		apiError(w, http.StatusNotFound, "connector_operation_not_found", "unknown operation "+req.Operation)
	}
}

// shellPair is one shell + wget combination, with a PATH that holds only
// the commands a shim may use, so a dependency on anything else fails.
type shellPair struct {
	name  string
	shell []string
	gnu   bool
	bin   string
}

// wrapperArgvLog is where the wget wrapper appends the argv wget got.
const wrapperArgvLog = "wget-argv.log"

func newShellPair(t *testing.T, name string) shellPair {
	t.Helper()
	bin := t.TempDir()
	link := func(name, target string) {
		if err := os.Symlink(target, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	// wget is a wrapper that records its argv (to check where the token
	// goes) and runs the real wget.
	wrap := func(shebang, exec string) {
		script := fmt.Sprintf("#!%s\nprintf '%%s\\n' \"$@\" >>\"$WGET_ARGV_LOG\"\nexec %s \"$@\"\n", shebang, exec)
		if err := os.WriteFile(filepath.Join(bin, "wget"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	switch name {
	case "dash+gnu-wget":
		dash := testkit.RequireTool(t, "dash")
		wget := testkit.RequireTool(t, "wget")
		if out, err := exec.Command(wget, "--version").Output(); err != nil || !bytes.Contains(out, []byte("GNU Wget")) {
			t.Fatalf("%s is not GNU wget: %v", wget, err)
		}
		for _, tool := range []string{"cat", "mktemp", "rm"} {
			link(tool, testkit.RequireTool(t, tool))
		}
		wrap(dash, wget)
		return shellPair{name: name, shell: []string{dash}, gnu: true, bin: bin}
	case "busybox":
		bb := testkit.RequireTool(t, "busybox")
		for _, tool := range []string{"cat", "mktemp", "rm"} {
			link(tool, bb)
		}
		wrap(bb+" sh", bb+" wget")
		return shellPair{name: name, shell: []string{bb, "sh"}, bin: bin}
	}
	t.Fatalf("unknown shell pair %q", name)
	return shellPair{}
}

// deadURL returns a loopback URL nothing listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return "http://" + addr
}

// awkwardArgs must reach the daemon byte for byte.
const awkwardArgs = " {\"s\": \"it's \\\"quoted\\\" \\\\ back\\\\slash \\n $HOME `id` $(id) %s %n ü 日本 🎉 \\u00e9\",\r\n\t\"t\": [1, 2.5e3, true, null, {\"x\": \"\\/\"}]\n} \n"

func TestToolsShims(t *testing.T) {
	r, err := Render(RenderOptions{Connectors: []policy.Connector{emuConnector()}})
	if err != nil {
		t.Fatalf("Render(emu) = %v", err)
	}
	script := writeScript(t, r.Shims[0])
	for _, pairName := range []string{"dash+gnu-wget", "busybox"} {
		t.Run(pairName, func(t *testing.T) {
			pair := newShellPair(t, pairName)
			testShimPair(t, pair, script)
		})
	}
}

func testShimPair(t *testing.T, pair shellPair, script string) {
	emu, srv := newRunEmulator(t)
	dead := deadURL(t)

	type tc struct {
		name       string
		args       []string
		env        map[string]string // overrides; "" removes
		wantCode   int
		wantStdout *string // nil: not checked
		wantErr    []string
		gnuErr     []string // only under GNU wget
		bbErr      []string // only under BusyBox wget
		wantCalls  int      // requests the daemon received
		check      func(t *testing.T, calls []emuCall, res runResult)
	}
	str := func(s string) *string { return &s }
	tests := []tc{
		{
			name: "awkward args go through byte for byte", args: []string{"echo", "--args", awkwardArgs},
			wantCode: ExitOK, wantStdout: str(strings.TrimSpace(awkwardArgs)), wantCalls: 1,
			check: func(t *testing.T, calls []emuCall, res runResult) {
				c := calls[0]
				auth := "" // BusyBox wget: the token travels in the body
				if !pair.gnu {
					auth = `,"api_token":"` + emuToken + `"`
				}
				want := `{"connector_fqn":"` + emuFQN + `","tool":"Emu","operation":"echo","args":` + awkwardArgs + auth + `}`
				if string(c.body) != want {
					t.Errorf("request body = %q, want %q", c.body, want)
				}
				if got := c.header.Get(HeaderSessionID); got != emuSession {
					t.Errorf("%s = %q, want %q", HeaderSessionID, got, emuSession)
				}
				if got := c.header.Get(HeaderOutput); got != OutputBody {
					t.Errorf("%s = %q, want %q", HeaderOutput, got, OutputBody)
				}
			},
		},
		{
			name: "--args= form and default args", args: []string{"echo", "--args={\"s\":\"a b\"}"},
			wantCode: ExitOK, wantStdout: str(`{"s":"a b"}`), wantCalls: 1,
		},
		{
			name: "no args sends {}", args: []string{"echo"},
			wantCode: ExitOK, wantStdout: str(`{}`), wantCalls: 1,
		},
		{
			name: "--json prints the envelope", args: []string{"echo", "--json", "--args", `{"s":"x"}`},
			wantCode: ExitOK, wantCalls: 1,
			check: func(t *testing.T, calls []emuCall, res runResult) {
				var env struct {
					Status         string          `json:"status"`
					UpstreamStatus int             `json:"upstream_status"`
					Body           json.RawMessage `json:"body"`
				}
				if err := json.Unmarshal([]byte(res.stdout), &env); err != nil || env.Status != "proxied" || env.UpstreamStatus != 200 || string(env.Body) != `{"s":"x"}` {
					t.Errorf("--json stdout = %q (%v), want the envelope", res.stdout, err)
				}
				if calls[0].header.Get(HeaderOutput) != "" {
					t.Errorf("--json sent %s", HeaderOutput)
				}
			},
		},
		{
			name: "trailing slash and no session id", args: []string{"created"},
			env:      map[string]string{"AILERON_API_URL": srv.URL + "/v1/", "AILERON_SESSION_ID": ""},
			wantCode: ExitOK, wantStdout: str("created\n"), wantCalls: 1,
			check: func(t *testing.T, calls []emuCall, res runResult) {
				if _, ok := calls[0].header[HeaderSessionID]; ok {
					t.Errorf("sent %s although AILERON_SESSION_ID is unset", HeaderSessionID)
				}
			},
		},
		{
			name: "proxy variables are ignored", args: []string{"created"},
			env:      map[string]string{"http_proxy": dead, "HTTP_PROXY": dead, "https_proxy": dead, "no_proxy": ""},
			wantCode: ExitOK, wantStdout: str("created\n"), wantCalls: 1,
		},
		{
			name: "upstream non-2xx prints the body", args: []string{"missing"},
			wantCode: ExitUpstream, wantStdout: str(`{"message":"Not Found"}`), wantErr: []string{"emu missing: upstream status 404\n"}, wantCalls: 1,
		},
		{
			name: "invalid_args", args: []string{"invalid", "--args", `{"s":1.5}`},
			wantCode: ExitUsage, wantStdout: str(""), wantCalls: 1,
			gnuErr: []string{`emu invalid: args.s: want a string, got 1.5; args.bogus: unknown input, "emu invalid" takes s (invalid_args, HTTP 400 Bad Request)` + "\n"},
			bbErr:  []string{"emu invalid: the daemon refused the arguments; check them with 'emu invalid --help'", "(HTTP 400 Bad Request)"},
		},
		{
			name: "approval denied", args: []string{"denied"},
			wantCode: ExitDenied, wantStdout: str(""), wantCalls: 1,
			gnuErr: []string{"emu denied: a person denied emu denied <call 1> & more (approval_denied, HTTP 403 Forbidden)\n"},
			bbErr:  []string{"emu denied: denied: the operation is not allowed in this session", "BusyBox wget does not show the daemon's reason", "(HTTP 403 Forbidden)"},
		},
		{
			name: "operation not allowed", args: []string{"forbidden"},
			wantCode: ExitDenied, wantCalls: 1, gnuErr: []string{"(operation_not_allowed, HTTP 403 Forbidden)"}, bbErr: []string{"HTTP 403"},
		},
		{
			name: "unknown to the daemon", args: []string{"gone"},
			wantCode: ExitUsage, wantCalls: 1, gnuErr: []string{`it offers: echo (connector_operation_not_found, HTTP 404 Not Found)`}, bbErr: []string{"does not offer this operation", "HTTP 404"},
		},
		{
			name: "daemon error", args: []string{"broken"},
			wantCode: ExitUnavailable, wantCalls: 1, gnuErr: []string{"connection refused (upstream_unreachable, HTTP 502 Bad Gateway)"}, bbErr: []string{"HTTP 502"},
		},
		{
			name: "wrong token", args: []string{"echo"}, env: map[string]string{"AILERON_TOKEN": "nope"},
			wantCode: ExitDenied, wantCalls: 1, wantErr: []string{"emu echo: the daemon refused AILERON_TOKEN; the session may have ended", "(HTTP 401 Unauthorized)\n"},
		},
		{
			name: "another session's id", args: []string{"echo"}, env: map[string]string{"AILERON_SESSION_ID": "other"},
			wantCode: ExitDenied, wantCalls: 1, gnuErr: []string{"session_mismatch"}, bbErr: []string{"HTTP 403"},
		},
		{
			name: "connection dropped: no retry", args: []string{"drop"},
			wantCode: ExitUnavailable, wantStdout: str(""), wantCalls: 1, wantErr: []string{"emu drop: the Aileron daemon at " + srv.URL + "/v1 closed the connection without a reply (", "the operation may have run"},
		},
		{
			name: "reply without the shim protocol", args: []string{"legacy"},
			wantCode: ExitProtocol, wantCalls: 1, wantErr: []string{"no X-Aileron-Upstream-Status header"},
		},
		{
			name: "daemon unreachable", args: []string{"echo"}, env: map[string]string{"AILERON_API_URL": dead + "/v1"},
			wantCode: ExitUnavailable, wantStdout: str(""), wantErr: []string{"emu echo: cannot reach the Aileron daemon at " + dead + "/v1: ", "onnection refused"},
		},
		{
			name: "AILERON_API_URL unset", args: []string{"echo"}, env: map[string]string{"AILERON_API_URL": ""},
			wantCode: ExitUnavailable, wantErr: []string{"emu echo: AILERON_API_URL is not set; run this inside an Aileron session"},
		},
		{
			name: "AILERON_TOKEN unset", args: []string{"echo"}, env: map[string]string{"AILERON_TOKEN": ""},
			wantCode: ExitUnavailable, wantErr: []string{"AILERON_TOKEN is not set"},
		},
		{name: "args not an object", args: []string{"echo", "--args", `["a"]`}, wantCode: ExitUsage, wantErr: []string{"emu echo: --args must be a JSON object", "Run 'emu echo --help'"}},
		{name: "args blank", args: []string{"echo", "--args", " \n "}, wantCode: ExitUsage, wantErr: []string{"--args must be a JSON object"}},
		{name: "args missing value", args: []string{"echo", "--args"}, wantCode: ExitUsage, wantErr: []string{"--args needs a JSON object"}},
		{name: "args twice", args: []string{"echo", "--args", "{}", "--args", "{}"}, wantCode: ExitUsage, wantErr: []string{"--args given twice"}},
		{name: "unknown flag", args: []string{"echo", "--verbose"}, wantCode: ExitUsage, wantErr: []string{`emu echo: unknown argument "--verbose"`}},
		{name: "unknown operation", args: []string{"nope"}, wantCode: ExitUsage, wantErr: []string{`emu: unknown operation "nope"; operations: echo, created, missing,`, "Run 'emu --help'"}},
		{name: "flag instead of operation", args: []string{"--json"}, wantCode: ExitUsage, wantErr: []string{`emu: unknown flag "--json"`}},
		{
			name: "help needs no daemon", args: []string{"echo", "--help"}, env: map[string]string{"AILERON_API_URL": "", "AILERON_TOKEN": ""},
			wantCode: ExitOK, wantErr: nil,
			check: func(t *testing.T, _ []emuCall, res runResult) {
				if !strings.HasPrefix(res.stdout, "emu echo\n") || res.stderr != "" {
					t.Errorf("emu echo --help = %q, stderr %q", res.stdout, res.stderr)
				}
			},
		},
	}

	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := len(emu.snapshot())
			res := runPair(t, pair, script, srv.URL, tc.env, tc.args...)
			calls := emu.snapshot()[before:]
			if res.code != tc.wantCode {
				t.Errorf("emu %s: exit %d, want %d\nstdout: %q\nstderr: %q", strings.Join(tc.args, " "), res.code, tc.wantCode, res.stdout, res.stderr)
			}
			if tc.wantStdout != nil && res.stdout != *tc.wantStdout {
				t.Errorf("emu %s: stdout %q, want %q", strings.Join(tc.args, " "), res.stdout, *tc.wantStdout)
			}
			wantErr := append([]string(nil), tc.wantErr...)
			if pair.gnu {
				wantErr = append(wantErr, tc.gnuErr...)
			} else {
				wantErr = append(wantErr, tc.bbErr...)
			}
			for _, w := range wantErr {
				if !strings.Contains(res.stderr, w) {
					t.Errorf("emu %s: stderr %q lacks %q", strings.Join(tc.args, " "), res.stderr, w)
				}
			}
			if tc.wantCode != 0 && strings.Count(strings.TrimSuffix(res.stderr, "\n"), "\n") > 1 {
				t.Errorf("emu %s: stderr has more than a message and a hint: %q", strings.Join(tc.args, " "), res.stderr)
			}
			if len(calls) != tc.wantCalls {
				t.Errorf("emu %s: daemon got %d requests, want %d", strings.Join(tc.args, " "), len(calls), tc.wantCalls)
			}
			if strings.Contains(res.stdout+res.stderr, emuToken) {
				t.Errorf("emu %s printed the token", strings.Join(tc.args, " "))
			}
			if tc.check != nil && len(calls) >= tc.wantCalls {
				tc.check(t, calls, res)
			}
		})
	}

	t.Run("approval held, then answered", func(t *testing.T) {
		done := make(chan runResult, 1)
		dir, env, argv := pairCommand(t, pair, script, srv.URL, nil, "approval", "--args", `{"s":"hi"}`)
		go func() {
			res, err := runE(dir, env, argv...)
			if err != nil {
				res.code, res.stderr = -1, err.Error()
			}
			done <- res
		}()
		select {
		case <-emu.arrived:
		case <-time.After(30 * time.Second):
			t.Fatal("the held request never reached the daemon")
		}
		select {
		case res := <-done:
			t.Fatalf("the shim returned while the call was held: %+v", res)
		default:
		}
		close(emu.release)
		select {
		case res := <-done:
			if res.code != 0 || res.stdout != `{"sent":true}` {
				t.Errorf("approved call: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the shim did not finish after the approval")
		}
	})

	t.Run("token not in argv", func(t *testing.T) {
		emu.mu.Lock()
		emu.argvWithToken, emu.clientArgvSeen = nil, false
		emu.mu.Unlock()
		logPath := filepath.Join(t.TempDir(), wrapperArgvLog)
		res := runPair(t, pair, script, srv.URL, map[string]string{"WGET_ARGV_LOG": logPath}, "echo")
		if res.code != 0 {
			t.Fatalf("emu echo: exit %d, stderr %q", res.code, res.stderr)
		}
		// Read from /proc while wget waited for the reply: this covers
		// BusyBox sh's own wget applet, which the wrapper cannot see.
		emu.mu.Lock()
		leaks, seen := emu.argvWithToken, emu.clientArgvSeen
		emu.mu.Unlock()
		if !seen {
			t.Errorf("no command line in /proc held %q while the call was served; the argv check saw nothing", RunPath)
		}
		if len(leaks) > 0 {
			t.Errorf("while the call was served, these command lines held the token: %q", leaks)
		}
		last := emu.last(t)
		if pair.gnu != (last.header.Get("Authorization") == "Bearer "+emuToken) || pair.gnu == (last.req.APIToken == emuToken) {
			t.Errorf("token sent as Authorization %q, api_token %q; want the header from GNU wget and the body from BusyBox",
				last.header.Get("Authorization"), last.req.APIToken)
		}
		if !pair.gnu {
			return
		}
		argv, err := os.ReadFile(logPath)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(argv, []byte(emuToken)) {
			t.Errorf("GNU wget got the token in argv:\n%s", argv)
		}
		for _, want := range []string{"--tries=1", "--no-proxy", "--max-redirect=0"} {
			if !bytes.Contains(argv, []byte(want+"\n")) {
				t.Errorf("GNU wget runs without %s:\n%s", want, argv)
			}
		}
	})

	t.Run("no temporary files left", func(t *testing.T) {
		tmp := t.TempDir()
		for _, args := range [][]string{{"echo"}, {"denied"}, {"missing"}} {
			runPair(t, pair, script, srv.URL, map[string]string{"TMPDIR": tmp}, args...)
		}
		if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
			t.Errorf("the shim left %d entries in TMPDIR", len(entries))
		}
	})
}

// runPair runs the shim under the pair's shell with a clean environment: no
// proxy variables, no CA variables, PATH holding only the allowed tools.
func runPair(t *testing.T, pair shellPair, script, base string, overrides map[string]string, args ...string) runResult {
	t.Helper()
	dir, env, argv := pairCommand(t, pair, script, base, overrides, args...)
	return run(t, dir, env, argv...)
}

// pairCommand returns the working directory, environment and argv of a run.
func pairCommand(t *testing.T, pair shellPair, script, base string, overrides map[string]string, args ...string) (string, []string, []string) {
	t.Helper()
	env := map[string]string{
		"PATH":               pair.bin,
		"HOME":               t.TempDir(),
		"TMPDIR":             t.TempDir(),
		"WGET_ARGV_LOG":      os.DevNull,
		"AILERON_API_URL":    base + "/v1",
		"AILERON_TOKEN":      emuToken,
		"AILERON_SESSION_ID": emuSession,
	}
	for k, v := range overrides {
		if v == "" {
			delete(env, k)
		} else {
			env[k] = v
		}
	}
	var list []string
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	argv := append(append(append([]string(nil), pair.shell...), script), args...)
	return t.TempDir(), list, argv
}

// argvHolding returns the command lines of running processes that contain
// secret.
func argvHolding(secret string) []string {
	paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(secret)) {
			out = append(out, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}

package audit

import (
	"bufio"
	"encoding/json"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestOpenCreatesPrivateFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "audit")
	path := filepath.Join(dir, "audit.jsonl")
	w, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for p, want := range map[string]os.FileMode{dir: 0o700, path: 0o600} {
		st, err := os.Stat(p)
		if err != nil || st.Mode().Perm() != want {
			t.Fatalf("mode of %s = %v (%v), want %04o", p, st.Mode().Perm(), err, want)
		}
	}
	// An existing file with a wider mode is tightened.
	loose := filepath.Join(dir, "loose.jsonl")
	if err := os.WriteFile(loose, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	w2, err := Open(loose)
	if err != nil {
		t.Fatal(err)
	}
	w2.Close()
	if st, _ := os.Stat(loose); st.Mode().Perm() != 0o600 {
		t.Fatalf("existing file mode %04o, want 0600", st.Mode().Perm())
	}
}

func readLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q is not valid JSON: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func TestRecordFillsAndSanitizes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	w, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now().UTC()
	w.Record(Event{Event: EventProxied, SessionID: "s1", Method: "GET", Host: "user:pw@api.example:443",
		Path: "/v1/items/7?access_token=CANARY#frag", Status: 200, Decision: "allowed", CredentialKind: "bearer",
		BytesOut: 12, DurationMS: 3, Fields: map[string]string{"path.id": "7", "query.q": RedactValue("secret")}})
	exit := 3
	local := time.Date(2026, 3, 1, 12, 0, 0, 0, time.FixedZone("X", 3600))
	w.Record(Event{Event: EventSessionEnded, AuditID: "aud_fixed", Time: local, ExitCode: &exit})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	if strings.Contains(string(data), "CANARY") || strings.Contains(string(data), "pw@") {
		t.Fatalf("query or user info written: %s", data)
	}
	lines := readLines(t, path)
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2", len(lines))
	}
	first := lines[0]
	if first["path"] != "/v1/items/7" || first["host"] != "api.example:443" {
		t.Fatalf("path/host = %v %v", first["path"], first["host"])
	}
	if id, _ := first["audit_id"].(string); !regexp.MustCompile(`^aud_[A-Za-z0-9_-]{20}$`).MatchString(id) {
		t.Fatalf("audit_id = %q", id)
	}
	ts, err := time.Parse(time.RFC3339Nano, first["time"].(string))
	if err != nil || ts.Before(before.Add(-time.Second)) || !strings.HasSuffix(first["time"].(string), "Z") {
		t.Fatalf("time = %v (%v), want a recent UTC time", first["time"], err)
	}
	var keys []string
	for k := range first {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	want := "audit_id bytes_in bytes_out credential_kind decision duration_ms event fields host method path session_id status time"
	if strings.Join(keys, " ") != want {
		t.Fatalf("keys = %s\nwant   %s", strings.Join(keys, " "), want)
	}
	second := lines[1]
	if second["audit_id"] != "aud_fixed" || second["time"] != "2026-03-01T11:00:00Z" || second["exit_code"] != float64(3) {
		t.Fatalf("second line = %v", second)
	}
}

// TestEventCarriesNoPayload pins the Event fields: none can hold headers,
// bodies, query strings or secrets, and adding one fails this test.
func TestEventCarriesNoPayload(t *testing.T) {
	want := map[string]string{
		"time": "time.Time", "event": "string", "audit_id": "string", "session_id": "string",
		"connector_fqn": "string", "tool": "string", "operation": "string", "method": "string",
		"host": "string", "path": "string", "status": "int", "decision": "string", "reason": "string",
		"credential_kind": "string", "bytes_in": "int64", "bytes_out": "int64", "duration_ms": "int64",
		"source": "string", "fields": "map[string]string", "exit_code": "*int",
		"websocket": "*audit.WebSocketStats",
		"action":    "string",
		"learned":   "*audit.Learned",
		"replica":   "string",
	}
	// A learned request is described by names and types only: these four
	// fields, each a name list, a name/type list or a media type.
	lt := reflect.TypeFor[Learned]()
	var lf []string
	for i := range lt.NumField() {
		lf = append(lf, lt.Field(i).Name+" "+lt.Field(i).Type.String())
	}
	if got := strings.Join(lf, ", "); got != "QueryNames []string, BodyKeys []audit.LearnedKey, ContentType string, ResponseContentType string" {
		t.Errorf("Learned fields = %s; a new field must carry no value", got)
	}
	typ := reflect.TypeFor[Event]()
	if typ.NumField() != len(want) {
		t.Fatalf("Event has %d fields, want %d", typ.NumField(), len(want))
	}
	for i := range typ.NumField() {
		f := typ.Field(i)
		name := strings.Split(f.Tag.Get("json"), ",")[0]
		if want[name] != f.Type.String() {
			t.Errorf("field %s (json %q) has type %s; want %q", f.Name, name, f.Type, want[name])
		}
		lower := strings.ToLower(f.Name)
		for _, bad := range []string{"header", "body", "query", "secret", "token", "authorization", "cookie"} {
			if strings.Contains(lower, bad) {
				t.Errorf("field %s could carry %s", f.Name, bad)
			}
		}
	}
}

func TestRecordConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	w, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, each = 50, 200
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				w.Record(Event{Event: EventDenied, SessionID: "s" + strconv.Itoa(g), Path: "/" + strings.Repeat("p", i*37%900),
					Fields: map[string]string{"n": strconv.Itoa(i)}})
			}
		})
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if w.Errors() != 0 {
		t.Fatalf("Errors() = %d", w.Errors())
	}
	lines := readLines(t, path)
	if len(lines) != goroutines*each {
		t.Fatalf("%d lines, want %d", len(lines), goroutines*each)
	}
	ids := map[string]bool{}
	for _, l := range lines {
		ids[l["audit_id"].(string)] = true
	}
	if len(ids) != len(lines) {
		t.Fatalf("%d distinct audit IDs for %d lines", len(ids), len(lines))
	}
	w.Record(Event{Event: EventDenied})
	if w.Errors() != 1 {
		t.Fatalf("Record after Close: Errors() = %d, want 1", w.Errors())
	}
}

func TestNewIDAndRedactValue(t *testing.T) {
	re := regexp.MustCompile(`^aud_[A-Za-z0-9_-]{20}$`)
	seen := map[string]bool{}
	for range 10000 {
		id := NewID()
		if !re.MatchString(id) || seen[id] {
			t.Fatalf("NewID() = %q (seen before: %v)", id, seen[id])
		}
		seen[id] = true
	}
	// sha256("abc") = ba7816bf8f01cfea...
	if got := RedactValue("abc"); got != "sha256:ba7816bf8f01" {
		t.Fatalf("RedactValue(abc) = %q", got)
	}
	if RedactValue("a") == RedactValue("b") {
		t.Fatal("RedactValue collides on trivial input")
	}
}

// TestNormalizeFillsAndStrips checks Normalize gives an event an ID and a
// time and drops the query from its path.
func TestNormalizeFillsAndStrips(t *testing.T) {
	ev := Normalize(Event{Event: EventSessionCreated, Path: "/x?y"})
	if ev.AuditID == "" || ev.Path != "/x" || ev.Time.IsZero() {
		t.Fatalf("Normalize = %+v", ev)
	}
}

// TestImports enforces purity: no other package of this module, no zap,
// echo or servers.
func TestImports(t *testing.T) {
	forbidden := map[string]string{
		"github.com/aileron-dev/aileron-proxy/": "audit depends on no other package of this module but coalesce",
		"go.uber.org/zap":                       "audit is pure: no logging globals",
		"github.com/labstack/echo":              "audit is pure: no servers",
		"net/http":                              "audit is pure: no servers, and no type that could carry headers",
		"log":                                   "no package-level logging",
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range af.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if path == "github.com/aileron-dev/aileron-proxy/coalesce" {
				continue // a leaf package batching the file's writes
			}
			for prefix, why := range forbidden {
				if path == prefix || strings.HasPrefix(path, strings.TrimSuffix(prefix, "/")+"/") {
					t.Errorf("%s imports %s: %s", f, path, why)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no package files checked")
	}
}

// Options.Replica reaches every event the Writer records.
func TestRecordSetsReplica(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	w, err := OpenWith(path, Options{Replica: "serve-1"})
	if err != nil {
		t.Fatal(err)
	}
	w.Record(Event{Event: EventSessionCreated, SessionID: "s1"})
	w.Record(Event{Event: EventProxied, Status: 200})
	w.Record(Event{Event: EventActionRun, ExitCode: new(int)})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) != 3 {
		t.Fatalf("got %d lines, want 3", len(lines))
	}
	for _, l := range lines {
		if !strings.Contains(l, `"replica":"serve-1"`) {
			t.Errorf("line %s lacks the replica", l)
		}
	}
}

package learn

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
	"github.com/aileron-dev/aileron-proxy/policy"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		seg  string
		want Class
	}{
		{"items", ClassWord}, {"v1", ClassWord}, {"repo.git", ClassWord}, {"info", ClassWord},
		{"17", ClassNumber}, {"0", ClassNumber},
		{"3f2504e0-4f89-11d3-9a0c-0305e82c3301", ClassUUID},
		{"deadbeef1", ClassHex}, {"a94a8fe5ccb19ba61c4c0873d391e987982fbbd3", ClassHex},
		{"decade", ClassWord}, // hex letters only: a word
		{"AbCdEf0123456789xyz_-", ClassToken},
		{"a%40b.example", ClassValue}, {"x=1", ClassValue},
		{strings.Repeat("word", 11), ClassValue},
	}
	for _, tc := range tests {
		if got := Classify(tc.seg); got != tc.want {
			t.Errorf("Classify(%q) = %v, want %v", tc.seg, got, tc.want)
		}
	}
}

func TestMaskPath(t *testing.T) {
	tests := map[string]string{
		"/items/17": "/items/{number}",
		"/orders/3f2504e0-4f89-11d3-9a0c-0305e82c3301/x": "/orders/{uuid}/x",
		"/":                    "/",
		"/users/a%40b.example": "/users/{value}",
		"relative":             "/{value}",
	}
	for in, want := range tests {
		if got := MaskPath(in); got != want {
			t.Errorf("MaskPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestValueType(t *testing.T) {
	tests := map[string]string{"12": TypeInteger, "-3": TypeInteger, "1.5": TypeNumber, "2e3": TypeNumber,
		"true": TypeBoolean, "open": TypeString, "": TypeString, "Inf": TypeString, "NaN": TypeString, "0x10": TypeString, "01": TypeInteger}
	for in, want := range tests {
		if got := ValueType(in); got != want {
			t.Errorf("ValueType(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestBodyKeys(t *testing.T) {
	tests := []struct {
		body string
		want []Field
	}{
		{`{"title":"x","count":2,"price":1.5,"ok":true,"tags":["a"],"meta":{"a":1},"none":null}`,
			[]Field{{"title", "string"}, {"count", "integer"}, {"price", "number"}, {"ok", "boolean"}, {"tags", "array"}, {"meta", "object"}, {"none", "null"}}},
		{`{"a":1,"a":"x"}`, []Field{{"a", "integer"}}},
		{`{"a":1,"b":"trunc`, []Field{{"a", "integer"}}}, // truncated value: left out
		{`[1,2]`, nil},
		{`not json`, nil},
		{``, nil},
	}
	for _, tc := range tests {
		if got := BodyKeys([]byte(tc.body)); !slices.Equal(got, tc.want) {
			t.Errorf("BodyKeys(%q) = %v, want %v", tc.body, got, tc.want)
		}
	}
}

func TestInferClientAuth(t *testing.T) {
	tests := []struct {
		auth    string
		headers []string
		want    ClientAuth
	}{
		{"Bearer placeholder", nil, ClientAuth{Kind: "bearer"}},
		{"basic dXNlcjpwYXNz", nil, ClientAuth{Kind: "basic"}},
		{"", []string{"Accept", "X-Api-Key"}, ClientAuth{Kind: "api_key", Header: "X-Api-Key"}},
		{"", []string{"X-Goog-Api-Key"}, ClientAuth{Kind: "api_key", Header: "X-Goog-Api-Key"}},
		{"", []string{"Accept"}, ClientAuth{}},
	}
	for _, tc := range tests {
		if got := InferClientAuth(tc.auth, tc.headers); got != tc.want {
			t.Errorf("InferClientAuth(%q, %v) = %+v, want %+v", tc.auth, tc.headers, got, tc.want)
		}
	}
}

// sampleRecord is a learn record of a small API: numeric and UUID ids, a
// search word that stays literal, user names merged as words, a git clone
// and push, query filters and JSON bodies.
func sampleRecord() *Record {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	q := func(names ...string) []Field {
		var f []Field
		for _, n := range names {
			name, typ, _ := strings.Cut(n, ":")
			f = append(f, Field{name, typ})
		}
		return f
	}
	json := "application/json"
	reqs := []Request{
		{Method: "GET", Host: "api.example.com:443", Path: "/v1/items", Query: q("status:string", "limit:integer"), Status: 200, ResponseContentType: json, Auth: ClientAuth{Kind: "bearer"}},
		{Method: "GET", Host: "api.example.com:443", Path: "/v1/items", Query: q("status:string"), Status: 200, ResponseContentType: json, Auth: ClientAuth{Kind: "bearer"}},
		{Method: "GET", Host: "api.example.com:443", Path: "/v1/items/17", Status: 200, ResponseContentType: json, Auth: ClientAuth{Kind: "bearer"}},
		{Method: "GET", Host: "api.example.com:443", Path: "/v1/items/42", Status: 200, ResponseContentType: json, Auth: ClientAuth{Kind: "bearer"}},
		{Method: "GET", Host: "api.example.com:443", Path: "/v1/items/search", Query: q("q:string"), Status: 200, ResponseContentType: json, Auth: ClientAuth{Kind: "bearer"}},
		{Method: "POST", Host: "api.example.com:443", Path: "/v1/items", Body: q("title:string", "count:integer", "tags:array"), ContentType: json, Status: 201, ResponseContentType: json, Auth: ClientAuth{Kind: "bearer"}},
		{Method: "POST", Host: "api.example.com:443", Path: "/v1/items", Body: q("title:string", "count:number"), ContentType: json, Status: 201, ResponseContentType: json, Auth: ClientAuth{Kind: "bearer"}},
		{Method: "DELETE", Host: "api.example.com:443", Path: "/v1/items/42", Status: 204, Auth: ClientAuth{Kind: "bearer"}},
		{Method: "GET", Host: "api.example.com:443", Path: "/v1/orders/3f2504e0-4f89-11d3-9a0c-0305e82c3301", Status: 200, ResponseContentType: json, Auth: ClientAuth{Kind: "bearer"}},
		{Method: "GET", Host: "api.example.com:443", Path: "/v1/orders/9a0c0305-4f89-11d3-9a0c-0305e82c3301", Status: 200, ResponseContentType: json, Auth: ClientAuth{Kind: "bearer"}},
		{Method: "GET", Host: "api.example.com:443", Path: "/v1/users/alice", Status: 200, ResponseContentType: json},
		{Method: "GET", Host: "api.example.com:443", Path: "/v1/users/bob", Status: 200, ResponseContentType: json},
		{Method: "GET", Host: "api.example.com:443", Path: "/v1/users/carol", Status: 200, ResponseContentType: json},
		// Same shape, different content type: stays apart.
		{Method: "GET", Host: "api.example.com:443", Path: "/v1/files/7", Status: 200, ResponseContentType: "text/plain"},
		{Method: "GET", Host: "api.example.com:443", Path: "/v1/files/8", Status: 200, ResponseContentType: json},
		{Method: "GET", Host: "git.example.org:443", Path: "/acme/tools.git/info/refs", Query: q("service:string"), Status: 200, ResponseContentType: "application/x-git-upload-pack-advertisement"},
		{Method: "POST", Host: "git.example.org:443", Path: "/acme/tools.git/git-upload-pack", ContentType: "application/x-git-upload-pack-request", Status: 200, ResponseContentType: "application/x-git-upload-pack-result"},
		{Method: "POST", Host: "git.example.org:443", Path: "/acme/tools.git/git-receive-pack", ContentType: "application/x-git-receive-pack-request", Status: 200, ResponseContentType: "application/x-git-receive-pack-result", Auth: ClientAuth{Kind: "basic"}},
		{Method: "GET", Host: "api.example.com:443", Path: "/v1/{weird}", Status: 404},
	}
	for i := range reqs {
		reqs[i].Time = at.Add(time.Duration(i) * time.Second)
	}
	return &Record{Header: Header{Version: RecordVersion, SessionID: "ses_0123456789abcdef01234567", Hosts: []string{"api.example.com", "*.example.org"}, CreatedAt: at}, Requests: reqs, Path: "sample.jsonl"}
}

func TestDraftGolden(t *testing.T) {
	res, err := Draft(sampleRecord(), Options{FQN: "local://acme/learned-demo"})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := res.JSON(nil)
	if err != nil {
		t.Fatal(err)
	}
	var review bytes.Buffer
	if err := res.WriteReview(&review); err != nil {
		t.Fatal(err)
	}
	for _, c := range res.CredentialCommands() {
		review.WriteString(c + "\n")
	}
	testkit.Golden(t, "testdata/draft.golden.json", spec)
	testkit.Golden(t, "testdata/draft-review.golden", review.Bytes())

	// Deterministic: shuffled input order, same bytes.
	rec := sampleRecord()
	slices.Reverse(rec.Requests)
	res2, err := Draft(rec, Options{FQN: "local://acme/learned-demo"})
	if err != nil {
		t.Fatal(err)
	}
	if spec2, _ := res2.JSON(nil); !bytes.Equal(spec, spec2) {
		t.Errorf("Draft output depends on the order of the record:\n%s\nvs\n%s", spec, spec2)
	}
	// Path values of identifiers never reach the review.
	for _, v := range []string{"17", "42", "3f2504e0", "alice"} {
		if strings.Contains(review.String(), "/"+v) {
			t.Errorf("review shows path value %q:\n%s", v, review.String())
		}
	}
}

func TestDraftApprovalFor(t *testing.T) {
	res, err := Draft(sampleRecord(), Options{FQN: "local://acme/learned-demo", ApprovalFor: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range res.Spec.Tools[0].Operations {
		want := op.Name == "git.receive-pack" // push keeps approval whatever the flag says
		if op.Approval.IsRequired() != want {
			t.Errorf("operation %s approval = %q, want required=%v", op.Name, op.Approval, want)
		}
	}
}

// TestDraftDocumented stands a hand-written spec in for an imported
// description: requests it documents take its names, templates and inputs,
// and only the documented operations called are drafted.
func TestDraftDocumented(t *testing.T) {
	docs := []policy.Operation{
		{Name: "getItem", Method: "GET", Path: "/v1/items/{itemId}", Hosts: []string{"api.example.com"}, Description: "Fetch one item",
			Inputs: []policy.Input{{Name: "itemId", Type: policy.InputInteger, Required: true}}},
		{Name: "listItems", Method: "GET", Path: "/v1/items", Inputs: []policy.Input{{Name: "status", Type: policy.InputString}}},
		{Name: "neverCalled", Method: "PUT", Path: "/v1/items/{itemId}"},
		{Name: "searchItems", Method: "GET", Path: "/v1/items/search", Hosts: []string{"other.example.com"}},
	}
	res, err := Draft(sampleRecord(), Options{FQN: "local://acme/learned-demo", Documented: docs})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]policy.Operation{}
	for _, op := range res.Spec.Tools[0].Operations {
		byName[op.Name] = op
	}
	if op, ok := byName["getItem"]; !ok || op.Path != "/v1/items/{itemId}" || op.Description != "Fetch one item" || len(op.Inputs) != 1 {
		t.Errorf("getItem = %+v, want the documented operation", op)
	}
	if _, ok := byName["listItems"]; !ok {
		t.Error("listItems not drafted")
	}
	if _, ok := byName["neverCalled"]; ok {
		t.Error("an operation never called was drafted")
	}
	if _, ok := byName["searchItems"]; ok {
		t.Error("a documented operation of another host matched")
	}
	for _, r := range res.Operations {
		// 17, 42 and "search": the documented template takes all three.
		if r.Name == "getItem" && (!r.Documented || r.Requests != 3) {
			t.Errorf("review of getItem = %+v, want documented with 3 requests", r)
		}
	}
}

func TestStore(t *testing.T) {
	home := t.TempDir()
	st, err := OpenStore(home)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Resolve(Last); err == nil || !strings.Contains(err.Error(), "launch --learn") {
		t.Fatalf("Resolve(LAST) on an empty store = %v, want an error naming launch --learn", err)
	}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, id := range []string{"ses_b", "ses_a"} {
		if err := st.Start(Header{SessionID: id, CreatedAt: t0.Add(time.Duration(i) * time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Append("ses_a", Request{Method: "GET", Host: "h:443", Path: "/x/1", Status: 200}); err != nil {
		t.Fatal(err)
	}
	st.Close("ses_a")
	if err := st.Append("ses_a", Request{}); err == nil {
		t.Error("Append after Close succeeded")
	}
	if id, err := st.Resolve(Last); err != nil || id != "ses_a" {
		t.Fatalf("Resolve(LAST) = %q, %v; want ses_a (the latest created)", id, err)
	}
	fi, err := os.Stat(st.Path("ses_a"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("record mode = %v, %v; want 0600", fi.Mode(), err)
	}
	if di, _ := os.Stat(filepath.Dir(st.Path("ses_a"))); di.Mode().Perm() != 0o700 {
		t.Errorf("record directory mode = %v, want 0700", di.Mode())
	}
	rec, err := st.Read("ses_a")
	if err != nil || len(rec.Requests) != 1 || rec.Requests[0].Path != "/x/1" {
		t.Fatalf("Read = %+v, %v", rec, err)
	}
	if _, err := st.Read("../etc"); err == nil {
		t.Error("Read accepted a path as a session ID")
	}
	if err := st.Remove("ses_a"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Read("ses_a"); err == nil || !strings.Contains(err.Error(), "--keep") {
		t.Errorf("Read after Remove = %v, want an error mentioning --keep", err)
	}
	// A torn last line is ignored; a bad line in the middle is an error.
	p := st.Path("ses_b")
	f, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"method":"GET","host":"h:443","path":"/a","status":200}` + "\n" + `{"method":"GE`)
	f.Close()
	if rec, err := st.Read("ses_b"); err != nil || len(rec.Requests) != 1 {
		t.Errorf("Read with a torn last line = %v, %v; want 1 request", rec, err)
	}
	f, _ = os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("\n" + `{"method":"GET","host":"h:443","path":"/b","status":200}` + "\n")
	f.Close()
	if _, err := st.Read("ses_b"); err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Errorf("Read with a bad middle line = %v, want an error naming line 3", err)
	}
}

// A record resumed after a restart keeps what it held and takes more.
func TestResumeKeepsTheRecord(t *testing.T) {
	home := t.TempDir()
	s, err := OpenStore(home)
	if err != nil {
		t.Fatal(err)
	}
	h := Header{SessionID: "ses_resume", Hosts: []string{"api.example.com"}}
	if err := s.Start(h); err != nil {
		t.Fatal(err)
	}
	if err := s.Append("ses_resume", Request{Method: "GET", Host: "api.example.com:443", Path: "/a"}); err != nil {
		t.Fatal(err)
	}
	s.Close("ses_resume")
	// A new process: nothing is open until Resume.
	s2, err := OpenStore(home)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Append("ses_resume", Request{Method: "GET", Host: "api.example.com:443", Path: "/b"}); err == nil {
		t.Fatal("Append before Resume succeeded")
	}
	if err := s2.Resume(h); err != nil {
		t.Fatal(err)
	}
	if err := s2.Append("ses_resume", Request{Method: "GET", Host: "api.example.com:443", Path: "/b"}); err != nil {
		t.Fatal(err)
	}
	s2.Close("ses_resume")
	rec, err := s2.Read("ses_resume")
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Requests) != 2 || rec.Requests[0].Path != "/a" || rec.Requests[1].Path != "/b" || rec.Header.SessionID != "ses_resume" {
		t.Errorf("resumed record = %+v, want /a then /b under its header", rec)
	}
	// Without a record, Resume starts one.
	if err := s2.Resume(Header{SessionID: "ses_new"}); err != nil {
		t.Fatal(err)
	}
	s2.Close("ses_new")
	if rec, err := s2.Read("ses_new"); err != nil || rec.Header.SessionID != "ses_new" {
		t.Errorf("Resume of an absent record = %+v, %v", rec, err)
	}
}

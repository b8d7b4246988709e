package sandboxhelper

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fsCall runs the helper's fs operation as `internal sandbox fs` does and
// returns its status and payload.
func fsCall(t *testing.T, req FSRequest, body string) (Status, string) {
	t.Helper()
	line, _ := json.Marshal(req)
	var out bytes.Buffer
	if code := RunFS(strings.NewReader(string(line)+"\n"+body), &out); code != 0 {
		t.Fatalf("RunSandboxFS(%+v) = %d", req, code)
	}
	head, payload, _ := strings.Cut(out.String(), "\n")
	var st Status
	if err := json.Unmarshal([]byte(head), &st); err != nil {
		t.Fatalf("status line %q: %v", head, err)
	}
	return st, payload
}

func errno(st Status) string {
	if st.Error == nil {
		return ""
	}
	return st.Error.Code
}

// TestSandboxFSNodeSemantics pins the file operations' Node fs semantics.
func TestSandboxFSNodeSemantics(t *testing.T) {
	d := t.TempDir()
	p := func(s string) string { return filepath.Join(d, s) }
	if err := os.WriteFile(p("f"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, l := range [][2]string{{p("f"), p("link")}, {p("nope"), p("dangling")}, {d, p("dirlink")}} {
		if err := os.Symlink(l[0], l[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(p("full/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		req  FSRequest
		body string
		want string // errno, "" for success
	}{
		{"read a file", FSRequest{Op: OpRead, Path: p("f")}, "", ""},
		{"read a directory", FSRequest{Op: OpRead, Path: d}, "", "EISDIR"},
		{"read a missing file", FSRequest{Op: OpRead, Path: p("nope")}, "", "ENOENT"},
		{"write under a missing parent", FSRequest{Op: OpWrite, Path: p("nope/x"), Size: 1}, "x", "ENOENT"},
		{"write over a directory", FSRequest{Op: OpWrite, Path: p("full"), Size: 1}, "x", "EISDIR"},
		{"write short", FSRequest{Op: OpWrite, Path: p("short"), Size: 5}, "abc", "EIO"},
		{"stat dangling", FSRequest{Op: OpStat, Path: p("dangling")}, "", "ENOENT"},
		// What the Flue connector's exists reads as "nothing there".
		{"stat below a file", FSRequest{Op: OpStat, Path: p("f/under")}, "", "ENOTDIR"},
		{"stat a name too long", FSRequest{Op: OpStat, Path: p(strings.Repeat("n", 256))}, "", "ENAMETOOLONG"},
		{"stat a NUL byte", FSRequest{Op: OpStat, Path: p("a\x00b")}, "", "EINVAL"},
		{"readdir a file", FSRequest{Op: OpReaddir, Path: p("f")}, "", "ENOTDIR"},
		{"mkdir existing", FSRequest{Op: OpMkdir, Path: p("full")}, "", "EEXIST"},
		{"mkdir missing parent", FSRequest{Op: OpMkdir, Path: p("a/b")}, "", "ENOENT"},
		{"mkdir -p existing dir", FSRequest{Op: OpMkdir, Path: p("full"), Recursive: true}, "", ""},
		{"mkdir -p over a file", FSRequest{Op: OpMkdir, Path: p("f"), Recursive: true}, "", "EEXIST"},
		{"mkdir -p", FSRequest{Op: OpMkdir, Path: p("a/b"), Recursive: true}, "", ""},
		{"rm missing", FSRequest{Op: OpRm, Path: p("nope")}, "", "ENOENT"},
		{"rm missing, force", FSRequest{Op: OpRm, Path: p("nope"), Force: true}, "", ""},
		{"rm a directory, force", FSRequest{Op: OpRm, Path: p("full"), Force: true}, "", "EISDIR"},
		{"rm a link to a directory", FSRequest{Op: OpRm, Path: p("dirlink")}, "", ""},
		{"rm -r", FSRequest{Op: OpRm, Path: p("full"), Recursive: true}, "", ""},
		{"unknown op", FSRequest{Op: "chmod", Path: p("f")}, "", "EINVAL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, _ := fsCall(t, tc.req, tc.body)
			if got := errno(st); got != tc.want {
				t.Errorf("fs %s %s = %q (%v), want %q", tc.req.Op, tc.req.Path, got, st.Error, tc.want)
			}
			if st.Error != nil && st.Error.Path != tc.req.Path {
				t.Errorf("error path = %q, want %q", st.Error.Path, tc.req.Path)
			}
		})
	}
	if _, err := os.Stat(d); err != nil {
		t.Fatalf("rm of a symlink to the directory followed it: %v", err)
	}
	if st, body := fsCall(t, FSRequest{Op: OpRead, Path: p("f")}, ""); st.Error != nil || body != "hello" {
		t.Errorf("read = %v %q", st.Error, body)
	}
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	if st, _ := fsCall(t, FSRequest{Op: OpWrite, Path: p("bytes"), Size: 256}, string(all)); st.Error != nil {
		t.Errorf("write = %+v", st)
	}
	if fi, err := os.Stat(p("bytes")); err != nil || fi.Size() != 256 {
		t.Errorf("written file: %v, %v; want 256 bytes", fi, err)
	}
	if st, body := fsCall(t, FSRequest{Op: OpRead, Path: p("bytes")}, ""); st.Error != nil || body != string(all) {
		t.Errorf("read back %d bytes, %v", len(body), st.Error)
	}
	st, _ := fsCall(t, FSRequest{Op: OpStat, Path: p("link")}, "")
	if st.Stat == nil || !st.Stat.IsFile || !st.Stat.IsSymbolicLink || st.Stat.Size != 5 || st.Stat.MtimeMs <= 0 {
		t.Errorf("stat link = %+v", st.Stat)
	}
	for _, n := range []string{".dot", "with space", "new\nline", "ünï"} {
		if err := os.WriteFile(p("a/"+n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	st, _ = fsCall(t, FSRequest{Op: OpReaddir, Path: p("a")}, "")
	if got := strings.Join(st.Names, "|"); got != ".dot|b|new\nline|with space|ünï" {
		t.Errorf("readdir = %q", got)
	}
}

// TestSandboxFSBadRequest: a malformed request line is exit 2, no status.
func TestSandboxFSBadRequest(t *testing.T) {
	var out bytes.Buffer
	for _, in := range []string{"", "not json\n", `{"op":"stat"}` + "\n"} {
		if code := RunFS(strings.NewReader(in), &out); code != 2 || out.Len() != 0 {
			t.Errorf("RunSandboxFS(%q) = %d, %q; want 2 and nothing", in, code, out.String())
		}
	}
}

// FuzzSandboxFS feeds the helper arbitrary request lines and bodies in a
// temporary directory: it never panics, always answers one JSON status
// line, names errors with an errno, and a successful read returns the
// file's bytes. Requests that would change anything outside the directory
// are skipped.
func FuzzSandboxFS(f *testing.F) {
	for _, seed := range []struct{ line, body string }{
		{`{"op":"stat","path":"f"}`, ""},
		{`{"op":"read","path":"f"}`, ""},
		{`{"op":"readdir","path":"."}`, ""},
		{`{"op":"write","path":"n","size":3}`, "abc"},
		{`{"op":"write","path":"n","size":9}`, "abc"},
		{`{"op":"mkdir","path":"a/b","recursive":true}`, ""},
		{`{"op":"rm","path":"a","recursive":true,"force":true}`, ""},
		{`{"op":"rm","path":"missing"}`, ""},
		{`{"op":"chmod","path":"f"}`, ""},
		{`not json`, ""},
	} {
		f.Add(seed.line, seed.body)
	}
	f.Fuzz(func(t *testing.T, line, body string) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "f"), []byte("content"), 0o644); err != nil {
			t.Fatal(err)
		}
		var req FSRequest
		if json.Unmarshal([]byte(line), &req) == nil && req.Path != "" {
			rel, err := filepath.Rel(dir, filepath.Join(dir, req.Path))
			if filepath.IsAbs(req.Path) || err != nil || strings.HasPrefix(rel, "..") || rel == "." && req.Op == OpRm {
				t.Skip("outside the temporary directory")
			}
			req.Path = filepath.Join(dir, req.Path)
			raw, _ := json.Marshal(req)
			line = string(raw)
		}
		var out bytes.Buffer
		code := RunFS(strings.NewReader(line+"\n"+body), &out)
		if code == 2 {
			if out.Len() != 0 {
				t.Fatalf("a refused request printed %q", out.String())
			}
			return
		}
		head, payload, _ := strings.Cut(out.String(), "\n")
		var st Status
		if err := json.Unmarshal([]byte(head), &st); err != nil {
			t.Fatalf("status line %q: %v", head, err)
		}
		if st.Error != nil && (st.Error.Code == "" || strings.ToUpper(st.Error.Code) != st.Error.Code) {
			t.Fatalf("error code %q", st.Error.Code)
		}
		if req.Op == OpRead && st.Error == nil {
			want, err := os.ReadFile(req.Path)
			if err != nil || payload != string(want) {
				t.Fatalf("read %s = %q, file holds %q (%v)", req.Path, payload, want, err)
			}
		}
	})
}

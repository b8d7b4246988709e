package integration

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// googleFQN is the connector Aileron's published manifests require.
const googleFQN = "github://ALRubinger/aileron-connector-google"

// driveFile is a file the Drive stand-in knows.
type driveFile struct {
	ID       string   `json:"id"`
	Name     string   `json:"name"`
	MimeType string   `json:"mimeType"`
	Parents  []string `json:"parents"`
}

// driveStandIn speaks Drive v3's wire format for files.get and
// files.update (PATCH) on loopback, checking what it receives: the bearer
// token on every call, a JSON object on the PATCH. It keeps the SHA-256 of
// each PATCH body it received.
type driveStandIn struct {
	mu      sync.Mutex
	files   map[string]*driveFile
	gets    []string // Authorization of each files.get
	patches []string // "sha256/size" of each PATCH body
}

// googleError writes Google's JSON error envelope.
func googleError(w http.ResponseWriter, code int, status, reason, msg, location, locationType string) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"code": code, "message": msg, "status": status,
		"errors": []map[string]any{{"message": msg, "domain": "global", "reason": reason, "location": location, "locationType": locationType}},
	}})
}

// fileJSON is a files resource as Drive answers it: with `fields` only
// those top-level fields (plus nothing else), without it the fields
// Aileron's connector asks for in its get_file_metadata (kind, id, name,
// mimeType, parents). Drive's own default set omits parents; the spec's
// get_file_metadata stands for the connector's operation, not the bare
// REST call.
func fileJSON(f *driveFile, fields string) map[string]any {
	all := map[string]any{"kind": "drive#file", "id": f.ID, "name": f.Name, "mimeType": f.MimeType, "parents": f.Parents}
	if fields == "" || fields == "*" {
		return all
	}
	out := map[string]any{}
	for _, k := range strings.Split(fields, ",") {
		if v, ok := all[strings.TrimSpace(k)]; ok {
			out[strings.TrimSpace(k)] = v
		}
	}
	return out
}

func (d *driveStandIn) handler() http.Handler {
	mux := http.NewServeMux()
	auth := func(w http.ResponseWriter, r *http.Request) bool {
		if r.Header.Get("Authorization") != "Bearer "+canary {
			googleError(w, 401, "UNAUTHENTICATED", "authError", "Request had invalid authentication credentials.", "Authorization", "header")
			return false
		}
		return true
	}
	mux.HandleFunc("GET /drive/v3/files/{fileId}", func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.gets = append(d.gets, r.Header.Get("Authorization"))
		if !auth(w, r) {
			return
		}
		f, ok := d.files[r.PathValue("fileId")]
		if !ok {
			msg := "File not found: " + r.PathValue("fileId") + "."
			googleError(w, 404, "", "notFound", msg, "fileId", "parameter")
			return
		}
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		_ = json.NewEncoder(w).Encode(fileJSON(f, r.URL.Query().Get("fields")))
	})
	mux.HandleFunc("PATCH /drive/v3/files/{fileId}", func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		if !auth(w, r) {
			return
		}
		// Drive takes the new parents as addParents/removeParents; the
		// spec's move_file sends its inputs as the JSON body, which Drive
		// reads as the file's metadata. The stand-in accepts both.
		var meta map[string]any
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") || json.Unmarshal(raw, &meta) != nil {
			googleError(w, 400, "INVALID_ARGUMENT", "parseError", "Parse Error", "", "")
			return
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		sum := sha256.Sum256(raw)
		d.patches = append(d.patches, fmt.Sprintf("%x/%d", sum, len(raw)))
		f, ok := d.files[r.PathValue("fileId")]
		if !ok {
			googleError(w, 404, "", "notFound", "File not found: "+r.PathValue("fileId")+".", "fileId", "parameter")
			return
		}
		add, remove := r.URL.Query().Get("addParents"), r.URL.Query().Get("removeParents")
		if s, ok := meta["add_parents"].(string); ok {
			add = s
		}
		if s, ok := meta["remove_parents"].(string); ok {
			remove = s
		}
		for _, p := range strings.Split(remove, ",") {
			f.Parents = slices.DeleteFunc(f.Parents, func(q string) bool { return q == p })
		}
		for _, p := range strings.Split(add, ",") {
			if p != "" && !slices.Contains(f.Parents, p) {
				f.Parents = append(f.Parents, p)
			}
		}
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		_ = json.NewEncoder(w).Encode(fileJSON(f, r.URL.Query().Get("fields")))
	})
	return mux
}

// runAction calls POST /v1/actions/NAME/run with the session's token.
func (e *env) runAction(t *testing.T, name, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.d.APIURL+"/v1/actions/"+name+"/run", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e.s.APIToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 90 * time.Second, Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		t.Error(err)
		return -1, nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if bytes.Contains(raw, []byte(canary)) {
		t.Errorf("the action's answer carries the credential")
	}
	var v map[string]any
	_ = json.Unmarshal(raw, &v)
	return resp.StatusCode, v
}

// TestPublishedMoveFilePreview installs Aileron's published move-file
// manifest unchanged (with the spec declaring the operations it names),
// runs it through the action endpoint against a Drive stand-in, and checks
// that its [approval.preview] fetched the file's real name and parents
// with the session's credential before the person was asked.
func TestPublishedMoveFilePreview(t *testing.T) {
	home := t.TempDir()
	drive := &driveStandIn{files: map[string]*driveFile{
		"1AbCfile": {ID: "1AbCfile", Name: "Q2 plan", MimeType: "application/vnd.google-apps.document", Parents: []string{"0BfolderA"}},
	}}
	up := newUpstream(t, []string{"www.googleapis.com"}, drive.handler())
	published := filepath.Join("..", "actions", "testdata", "aileron-connector-google")
	mustCLI(t, home, "", "connector", "install", filepath.Join(published, "connector.aileron.connector.v1.json"))
	mustCLI(t, home, canary+"\n", "credential", "set", googleFQN, "--kind", "oauth2", "--stdin")
	manifest, err := os.ReadFile(filepath.Join(published, "actions", "move-file", "action.md"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "actions", "move-file"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "actions", "move-file", "action.md"), manifest, 0o644); err != nil {
		t.Fatal(err)
	}
	mustCLI(t, home, "", "action", "install", dir)
	d := startServe(t, home, nil, "--resolve", "www.googleapis.com:443="+up.addr, "--upstream-ca", up.certFile, "--approval-timeout", "60s")
	e := &env{home: home, up: up, d: d, s: createSession(t, home, "--connector", googleFQN)}
	t.Cleanup(func() { e.assertNoCanary(t) })

	type result struct {
		code int
		v    map[string]any
	}
	move := func(fileID string) <-chan result {
		ch := make(chan result, 1)
		go func() {
			var r result
			defer func() { ch <- r }()
			r.code, r.v = e.runAction(t, "move-file", fmt.Sprintf(`{"args":{"file_id":%q,"add_parents":"0BfolderB","remove_parents":"0BfolderA"}}`, fileID))
		}()
		return ch
	}

	t.Run("fetched name and parents", func(t *testing.T) {
		ch := move("1AbCfile")
		a := e.waitPending(t, "move_file")
		pv, _ := a["preview"].(map[string]any)
		f, _ := pv["fetch"].(map[string]any)
		if f == nil || f["state"] != "fetched" || f["operation"] != "google-api get_file_metadata" {
			t.Fatalf("fetch = %v, want get_file_metadata fetched", pv["fetch"])
		}
		byLabel := map[string]string{}
		for _, x := range f["fields"].([]any) {
			fl := x.(map[string]any)
			byLabel[fmt.Sprint(fl["label"])] = fmt.Sprint(fl["value"])
		}
		if byLabel["Name"] != "Q2 plan" || byLabel["CurrentParents"] != `["0BfolderA"]` || byLabel["Type"] != "application/vnd.google-apps.document" {
			t.Errorf("rendered = %v, want the file's real name, type and parents", byLabel)
		}
		if p := fieldsOf(pv["path_params"]); p["file_id"]["label"] != "File ID" || p["file_id"]["value"] != "1AbCfile" {
			t.Errorf("path params = %v, want file_id labelled File ID", pv["path_params"])
		}
		b, _ := pv["body"].(map[string]any)
		if bf := fieldsOf(b["fields"]); bf["add_parents"]["label"] != "Move to (folder ids)" || bf["add_parents"]["value"] != "0BfolderB" {
			t.Errorf("body fields = %v, want add_parents labelled from the manifest", b["fields"])
		}
		drive.mu.Lock()
		gets := slices.Clone(drive.gets)
		patched := len(drive.patches)
		drive.mu.Unlock()
		if len(gets) != 1 || gets[0] != "Bearer "+canary || patched != 0 {
			t.Errorf("before the decision Drive saw %d files.get (want 1 with the credential) and %d PATCHes (want 0)", len(gets), patched)
		}
		show := mustCLI(t, home, "", "approvals", "show", fmt.Sprint(a["id"]))
		for _, want := range []string{"Fetched:    google-api get_file_metadata (status 200)", "Name: Q2 plan", `CurrentParents: ["0BfolderA"]`, "File ID: 1AbCfile", "Move to (folder ids): 0BfolderB"} {
			if !strings.Contains(show, want) {
				t.Errorf("`approvals show` lacks %q:\n%s", want, show)
			}
		}
		ev := waitAudit(t, home, map[string]any{"event": "approval.preview_fetch", "operation": "get_file_metadata"})
		if ev["credential_kind"] != "oauth2" || ev["decision"] != "allowed" || ev["path"] != "/drive/v3/files/1AbCfile" {
			t.Errorf("preview fetch event = %v", ev)
		}

		mustCLI(t, home, "", "approvals", "approve", fmt.Sprint(a["id"]))
		r := <-ch
		if r.code != 200 || fmt.Sprint(r.v["upstream_status"]) != "200" {
			t.Fatalf("approved move-file = %d %v", r.code, r.v)
		}
		fields, _ := decidedEvent(t, home, fmt.Sprint(a["id"]))["fields"].(map[string]any)
		drive.mu.Lock()
		defer drive.mu.Unlock()
		if len(drive.patches) != 1 || drive.patches[0] != fmt.Sprintf("%s/%s", fields["body_sha256"], fields["body_size"]) {
			t.Errorf("Drive received PATCH bodies %v; the approval event records %v/%v", drive.patches, fields["body_sha256"], fields["body_size"])
		}
		if got := drive.files["1AbCfile"].Parents; !slices.Equal(got, []string{"0BfolderB"}) {
			t.Errorf("parents after the move = %v, want [0BfolderB]", got)
		}
	})

	t.Run("an unknown file: the fetch fails, the person denies", func(t *testing.T) {
		ch := move("1missing")
		a := e.waitPending(t, "move_file")
		f, _ := a["preview"].(map[string]any)["fetch"].(map[string]any)
		if f == nil || f["state"] != "failed" || fmt.Sprint(f["status"]) != "404" || f["code"] != "upstream_status" {
			t.Errorf("fetch of an unknown file = %v, want failed 404", f)
		}
		mustCLI(t, home, "", "approvals", "deny", fmt.Sprint(a["id"]))
		r := <-ch
		if r.code != 403 || !strings.Contains(fmt.Sprint(r.v), "approval_denied") {
			t.Errorf("denied move-file = %d %v", r.code, r.v)
		}
		drive.mu.Lock()
		defer drive.mu.Unlock()
		if len(drive.patches) != 1 {
			t.Errorf("a denied move reached Drive (%d PATCHes)", len(drive.patches))
		}
	})
}

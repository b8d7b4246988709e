package main

import (
	"compress/gzip"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/policy"
)

const importTestdata = "../../openapiimport/testdata/openapi/"

// importDoc is a small self-contained description used by several tests.
const importDoc = `openapi: 3.0.3
info: {title: items, version: 2.1.0}
servers: [{url: "https://api.items.example.test/v1"}]
components:
  securitySchemes:
    key: {type: apiKey, in: header, name: X-Api-Key}
security: [{key: []}]
paths:
  /items/{id}:
    get:
      operationId: items/get
      parameters:
        - {name: id, in: path, required: true, schema: {type: integer}}
        - {name: fields, in: query, schema: {type: string}}
      responses: {"200": {description: ok}}
    delete:
      operationId: items/delete
      parameters:
        - {name: id, in: path, required: true, schema: {type: integer}}
      responses: {"204": {description: gone}}
`

func importWrite(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// importGunzip decompresses one of openapiimport's real descriptions.
func importGunzip(t *testing.T, name string) string {
	t.Helper()
	f, err := os.Open(importTestdata + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return importWrite(t, strings.TrimSuffix(name, ".gz"), string(data))
}

// importInstalled lists what the store of home holds.
func importInstalled(t *testing.T, home string) []policy.Installed {
	t.Helper()
	st, err := policy.OpenStore(home)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := st.List()
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

func TestConnectorImportOutputAndInstall(t *testing.T) {
	home := t.TempDir()
	doc := importWrite(t, "items.yaml", importDoc)
	args := []string{"connector", "import", "--openapi", doc, "--fqn", "local://test/items"}

	stdout, stderr, code := runCLI(t, home, "", nil, args...)
	if code != exitOK {
		t.Fatalf("import to stdout: exit %d\n%s", code, stderr)
	}
	if _, _, err := policy.ParseSpec([]byte(stdout)); err != nil {
		t.Fatalf("stdout is not a valid spec: %v\n%s", err, stdout)
	}
	for _, want := range []string{"imported 2 operations of 2 in the document (0 filtered out, 0 skipped)",
		"aileron-proxy credential set local://test/items --kind api_key --header X-Api-Key --from-env ITEMS_API_KEY"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}

	out := filepath.Join(t.TempDir(), "items.aileron.connector.v1.json")
	o, e, code := runCLI(t, home, "", nil, append(args, "-o", out)...)
	if code != exitOK || o != "" || !strings.Contains(e, "imported 2 operations") {
		t.Fatalf("-o: exit %d, stdout %q, stderr %q", code, o, e)
	}
	written, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if string(written) != stdout {
		t.Errorf("-o wrote different bytes from stdout (the import is deterministic)")
	}
	if n := len(importInstalled(t, home)); n != 0 {
		t.Fatalf("-o installed %d connectors", n)
	}

	o, e, code = runCLI(t, home, "", nil, append(args, "--install")...)
	hash, err := policy.PackageHash(out)
	if err != nil {
		t.Fatal(err)
	}
	if code != exitOK || o != "installed local://test/items 2.1.0 "+hash+"\n" {
		t.Fatalf("--install: exit %d, stdout %q, stderr %q", code, o, e)
	}
	entries := importInstalled(t, home)
	if len(entries) != 1 || entries[0].Hash != hash || !entries[0].IsActive() {
		t.Fatalf("store holds %+v, want the imported spec active", entries)
	}
	if ops := entries[0].Spec.Tools[0].Operations; len(ops) != 2 || ops[0].Name != "items.get" || ops[0].Path != "/v1/items/{id}" {
		t.Errorf("installed operations = %+v", ops)
	}

	if _, e, code := runCLI(t, home, "", nil, append(args, "-o", out, "--install")...); code != exitUsage || !strings.Contains(e, "exclusive") {
		t.Errorf("-o with --install: exit %d, stderr %q", code, e)
	}
}

// TestConnectorImportInstallsNothingOnError checks each bad input exits 1
// with a located error and leaves the store empty.
func TestConnectorImportInstallsNothingOnError(t *testing.T) {
	big := importBigDoc(1200, 40)
	for _, tc := range []struct {
		name, doc string
		extra     []string
		want      []string
	}{
		{"malformed", "openapi: 3.0.3\npaths:\n  /a: [\n", nil,
			[]string{"openapi.yaml: line ", "not valid JSON or YAML", "nothing was written"}},
		{"remote ref", strings.Replace(importDoc, "schema: {type: string}", "schema: {$ref: 'https://schemas.example.test/s.yaml#/S'}", 1), nil,
			[]string{"openapi.yaml: /paths/~1items~1{id}/get/parameters/1/schema/$ref (line 14)", "points to a remote URL", "never fetches more than the document"}},
		{"no operations after filtering", importDoc, []string{"--include", "POST /**"},
			[]string{"no operations to import", "the document has 2 operations and 2 were filtered out", "loosen --include"}},
		{"over the spec size limit", big, nil,
			[]string{"the imported spec is ", "(1200 operations), over the 4194304-byte (4 MiB) limit", "--include 'METHOD PATHGLOB', --tag or --operation-id", "nothing was installed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home := t.TempDir()
			doc := importWrite(t, "openapi.yaml", tc.doc)
			args := append([]string{"connector", "import", "--openapi", doc, "--fqn", "local://test/items", "--install"}, tc.extra...)
			stdout, stderr, code := runCLI(t, home, "", nil, args...)
			if code != exitFailure {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, exitFailure, stdout, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
			if n := len(importInstalled(t, home)); n != 0 {
				t.Errorf("the store holds %d connectors after a failed import", n)
			}
		})
	}
}

// importBigDoc is a description of ops GET operations with params query
// parameters each, large enough that its spec is over the size limit.
func importBigDoc(ops, params int) string {
	var b strings.Builder
	b.WriteString("openapi: 3.0.3\ninfo: {title: big, version: 1.0.0}\nservers: [{url: \"https://big.example.test\"}]\npaths:\n")
	for i := range ops {
		fmt.Fprintf(&b, "  /things%d/{id}:\n    get:\n      operationId: things%d\n      summary: Get a thing of kind %d\n      parameters:\n        - {name: id, in: path, required: true, schema: {type: string}}\n", i, i, i)
		for j := range params {
			fmt.Fprintf(&b, "        - {name: filter%d, in: query, description: Only things whose attribute %d equals this value, schema: {type: string}}\n", j, j)
		}
		b.WriteString("      responses: {\"200\": {description: ok}}\n")
	}
	return b.String()
}

// TestConnectorImportDiff installs Stripe's July 2019 description and
// diffs its November 2019 revision against it: operations added and
// removed, nothing written.
func TestConnectorImportDiff(t *testing.T) {
	home := t.TempDir()
	older, newer := importGunzip(t, "stripe.json.gz"), importGunzip(t, "stripe-2019-11-06.json.gz")
	base := []string{"connector", "import", "--fqn", "local://test/stripe", "--tool", "stripe", "--version", "1.0.0"}
	if _, e, code := runCLI(t, home, "", nil, append(base, "--openapi", older, "--install")...); code != exitOK {
		t.Fatalf("install the older revision: exit %d\n%s", code, e)
	}
	before := importInstalled(t, home)

	stdout, stderr, code := runCLI(t, home, "", nil, append(base, "--openapi", newer, "--diff")...)
	if code != exitOK {
		t.Fatalf("--diff: exit %d\n%s", code, stderr)
	}
	for _, want := range []string{
		"+ stripe/GetMandatesMandate GET /v1/mandates/{mandate}\n",
		"- stripe/PostEventsIdRetry POST /v1/events/{id}/retry\n",
		"~ stripe/GetRefunds GET /v1/refunds: inputs\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("--diff output lacks %q:\n%s", want, stdout)
		}
	}
	after := importInstalled(t, home)
	if len(after) != 1 || after[0].Hash != before[0].Hash {
		t.Errorf("--diff changed the store: %d entries", len(after))
	}

	// Against itself: nothing changes.
	stdout, _, code = runCLI(t, home, "", nil, append(base, "--openapi", older, "--diff")...)
	if code != exitOK || stdout != "no operation changes\n" {
		t.Errorf("--diff of the installed revision: exit %d, stdout %q", code, stdout)
	}
}

// TestConnectorImportHTTPS fetches a description from a loopback TLS
// server: trusted explicitly it imports; with the system's roots only, the
// self-signed server is refused.
func TestConnectorImportHTTPS(t *testing.T) {
	petstore, err := os.ReadFile(importTestdata + "petstore-v3.0.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var fetched int
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetched++
		if r.URL.Path != "/petstore.yaml" {
			http.NotFound(w, r)
			return
		}
		w.Write(petstore)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake
	srv.StartTLS()
	defer srv.Close()
	args := []string{"connector", "import", "--openapi", srv.URL + "/petstore.yaml", "--fqn", "local://test/petstore", "--host", "petstore.example.test"}

	home := t.TempDir()
	if _, stderr, code := runCLI(t, home, "", nil, args...); code != exitFailure || !strings.Contains(stderr, "certificate") {
		t.Fatalf("untrusted server: exit %d, stderr %q; want a certificate error", code, stderr)
	}

	saved := importHTTPClient
	importHTTPClient = srv.Client()
	t.Cleanup(func() { importHTTPClient = saved })
	stdout, stderr, code := runCLI(t, home, "", nil, args...)
	if code != exitOK {
		t.Fatalf("trusted server: exit %d\n%s", code, stderr)
	}
	spec, _, err := policy.ParseSpec([]byte(stdout))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, op := range spec.Tools[0].Operations {
		names = append(names, op.Name)
	}
	if got := strings.Join(names, " "); got != "listPets createPets showPetById" {
		t.Errorf("operations = %s", got)
	}
	if fetched != 1 {
		t.Errorf("the server served %d requests, want 1 (the trusted import)", fetched)
	}

	if _, stderr, code := runCLI(t, home, "", nil, "connector", "import", "--openapi", "http://"+srv.Listener.Addr().String()+"/petstore.yaml", "--fqn", "local://test/petstore"); code != exitUsage || !strings.Contains(stderr, "only https:// URLs") {
		t.Errorf("http:// URL: exit %d, stderr %q", code, stderr)
	}
}

package openapiimport_test

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/openapiimport"
	"github.com/aileron-dev/aileron-proxy/policy"
)

func writeDoc(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "openapi.yaml")
}

const okDoc = `openapi: 3.0.3
info: {title: t, version: 1.0.0}
servers: [{url: "https://api.example.test/v1"}]
paths:
  /items/{id}:
    get:
      operationId: items/get
      parameters:
        - {name: id, in: path, required: true, schema: {type: integer}}
        - {name: fields, in: query, schema: {type: string}}
      responses: {"200": {description: ok}}
`

// TestImportErrors checks each bad input gets an error naming the file and
// where in it.
func TestImportErrors(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		opts  openapiimport.Options
		want  []string
	}{
		{"malformed", map[string]string{"openapi.yaml": "openapi: 3.0.3\npaths:\n  /a: [\n"}, openapiimport.Options{},
			[]string{"openapi.yaml: line ", "not valid JSON or YAML"}},
		{"unresolvable local ref", map[string]string{"openapi.yaml": strings.Replace(okDoc, "schema: {type: string}", "schema: {$ref: '#/components/schemas/Nope'}", 1)}, openapiimport.Options{},
			[]string{"openapi.yaml", "does not resolve", "Nope"}},
		{"missing file ref", map[string]string{"openapi.yaml": strings.Replace(okDoc, "schema: {type: string}", "schema: {$ref: 'schemas/missing.yaml'}", 1)}, openapiimport.Options{},
			[]string{"openapi.yaml: /paths/~1items~1{id}/get/parameters/1/schema/$ref (line 10)", "does not resolve"}},
		{"remote ref", map[string]string{"openapi.yaml": strings.Replace(okDoc, "schema: {type: string}", "schema: {$ref: 'https://example.test/s.yaml#/X'}", 1)}, openapiimport.Options{},
			[]string{"openapi.yaml: /paths/~1items~1{id}/get/parameters/1/schema/$ref", "remote URL"}},
		{"remote ref in another file", map[string]string{
			"openapi.yaml":   strings.Replace(okDoc, "schema: {type: string}", "schema: {$ref: 'schemas/s.yaml'}", 1),
			"schemas/s.yaml": "type: object\nproperties:\n  a: {$ref: 'http://example.test/a.yaml'}\n"}, openapiimport.Options{},
			[]string{"schemas/s.yaml: /properties/a/$ref (line 3)", "remote URL"}},
		{"no operations after filtering", map[string]string{"openapi.yaml": okDoc}, openapiimport.Options{Include: []string{"POST /**"}},
			[]string{"openapi.yaml", "no operations to import", "loosen"}},
		{"no host", map[string]string{"openapi.yaml": strings.Replace(okDoc, "https://api.example.test/v1", "https://your-domain.example.test/v1", 1)}, openapiimport.Options{},
			[]string{"placeholder host", "--host"}},
		{"not openapi", map[string]string{"openapi.yaml": "hello: world\n"}, openapiimport.Options{},
			[]string{"openapi.yaml: line 1", "neither \"openapi\" nor \"swagger\""}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src, err := openapiimport.ReadFile(writeDoc(t, tc.files))
			if err != nil {
				t.Fatal(err)
			}
			tc.opts.FQN = "local://example/x"
			res, err := openapiimport.Import(src, tc.opts)
			if err == nil {
				t.Fatalf("Import = %s, want an error", res.JSON)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Import error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestImportMapping checks the mapping rules on a small document.
func TestImportMapping(t *testing.T) {
	doc := `openapi: 3.1.0
info: {title: t, version: 2.0.0}
servers:
  - url: "https://{region}.api.example.test/base/"
    variables: {region: {default: eu}}
  - url: "http://insecure.example.test/base"
components:
  securitySchemes:
    key: {type: apiKey, in: header, name: X-Api-Key}
security: [{key: []}]
paths:
  /repos/{owner}/{repo-name}:
    parameters:
      - {name: owner, in: path, required: true, schema: {type: string}, description: path level}
      - {name: X-Trace, in: header, schema: {type: string}}
    get:
      operationId: repos/get
      parameters:
        - {name: owner, in: path, required: true, schema: {type: string}, description: op level}
        - {name: repo-name, in: path, required: true, schema: {type: string}}
        - {name: per_page, in: query, schema: {type: [integer, "null"]}}
      responses: {"200": {description: ok}}
    post:
      operationId: repos/update
      x-aileron-approval: required
      security: []
      requestBody:
        content:
          application/json:
            schema:
              allOf:
                - {type: object, properties: {title: {type: string}}, required: [title]}
                - {type: object, properties: {labels: {type: array, items: {type: string}}}}
      responses: {"200": {description: ok}}
    delete:
      x-aileron-skip: true
      responses: {"204": {description: gone}}
  /files/{+path}:
    get: {responses: {"200": {description: ok}}}
  /v1/models/{model}:generate:
    post:
      operationId: generate
      x-aileron-idempotency: idempotent
      requestBody: {content: {multipart/form-data: {schema: {type: object}}}}
      responses: {"200": {description: ok}}
`
	src, err := openapiimport.ReadFile(writeDoc(t, map[string]string{"openapi.yaml": doc}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := openapiimport.Import(src, openapiimport.Options{FQN: "local://example/aileron-connector-demo", ApprovalFor: []string{"get"}})
	if err != nil {
		t.Fatal(err)
	}
	ops := map[string]policy.Operation{}
	for _, op := range res.Spec.Tools[0].Operations {
		ops[op.Name] = op
	}
	get, post, gen := ops["repos.get"], ops["repos.update"], ops["generate"]
	if get.Path != "/base/repos/{owner}/{repo-name}" || len(get.Hosts) != 1 || get.Hosts[0] != "eu.api.example.test" {
		t.Errorf("repos.get path %q hosts %q", get.Path, get.Hosts)
	}
	if len(get.Inputs) != 3 || get.Inputs[0].Description != "op level" || !get.Inputs[0].Required || get.Inputs[2].Type != policy.InputInteger {
		t.Errorf("repos.get inputs %+v", get.Inputs)
	}
	if get.Credential != policy.CredentialAPIKey || get.Approval != policy.ApprovalRequired || get.Idempotency != policy.Idempotent {
		t.Errorf("repos.get facts %q %q %q", get.Credential, get.Approval, get.Idempotency)
	}
	if post.Credential != "" || post.Approval != policy.ApprovalRequired || post.Idempotency != policy.NotIdempotent {
		t.Errorf("repos.update facts %q %q %q", post.Credential, post.Approval, post.Idempotency)
	}
	if len(post.Inputs) != 4 || post.Inputs[2].Name != "title" || !post.Inputs[2].Required || post.Inputs[3].Type != policy.InputArray {
		t.Errorf("repos.update inputs %+v", post.Inputs)
	}
	if gen.Path != "/base/v1/models/{model}:generate" || gen.Idempotency != policy.Idempotent {
		t.Errorf("generate %q %q", gen.Path, gen.Idempotency)
	}
	if len(res.Spec.Tools[0].Operations) != 3 || res.Filtered != 1 || len(res.Skipped) != 1 || !strings.Contains(res.Skipped[0].String(), "{+name}") {
		t.Errorf("ops %d filtered %d skipped %v", len(res.Spec.Tools[0].Operations), res.Filtered, res.Skipped)
	}
	var notes []string
	for _, n := range res.Notes {
		notes = append(notes, n.String())
	}
	all := strings.Join(notes, "\n")
	for _, w := range []string{`header parameter "X-Trace"`, "multipart/form-data", `"http://insecure.example.test/base" is not https`} {
		if !strings.Contains(all, w) {
			t.Errorf("notes %q lack %q", all, w)
		}
	}
	if len(res.Credentials) != 1 || !strings.Contains(res.Credentials[0].Command, "--kind api_key --header X-Api-Key --from-env DEMO_API_KEY") {
		t.Errorf("credentials %+v", res.Credentials)
	}
	if res.Spec.Connector.Version != "2.0.0" {
		t.Errorf("version %q", res.Spec.Connector.Version)
	}
	if !errors.Is(openapiimport.ErrNoOperations, openapiimport.ErrNoOperations) {
		t.Fatal("unreachable")
	}
}

func TestMatchPathGlob(t *testing.T) {
	for _, tc := range []struct {
		glob, path string
		want       bool
	}{
		{"/repos/**", "/repos/{owner}/{repo}/issues", true},
		{"/repos/*", "/repos/{owner}/{repo}", false},
		{"/repos/*/*", "/repos/{owner}/{repo}", true},
		{"/user", "/user", true},
		{"/user", "/users", false},
		{"/**/issues", "/repos/a/b/issues", true},
	} {
		if got := openapiimport.MatchPathGlob(tc.glob, tc.path); got != tc.want {
			t.Errorf("MatchPathGlob(%q, %q) = %v, want %v", tc.glob, tc.path, got, tc.want)
		}
	}
}

// FuzzImport feeds arbitrary documents to the importer: it never panics,
// and whatever it returns is a valid spec.
func FuzzImport(f *testing.F) {
	f.Add([]byte(okDoc))
	f.Add([]byte(cyclicAllOfDoc))
	for _, name := range []string{"petstore-v2.json", "petstore-v3.0.yaml", "tictactoe-v3.1.yaml"} {
		data, err := os.ReadFile(filepath.Join("testdata/openapi", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := openapiimport.Import(openapiimport.Source{Data: data, Name: "fuzz.yaml"},
			openapiimport.Options{FQN: "local://example/fuzz", Hosts: []string{"fuzz.example.test"}})
		if err != nil {
			return
		}
		if _, _, err := policy.ParseSpec(res.JSON); err != nil {
			t.Fatalf("Import returned an invalid spec: %v\n%s", err, res.JSON)
		}
	})
}

// cyclicAllOfDoc is a body schema whose allOf (and a property's oneOf) name
// the schema itself several times. Walked naively, with only a depth bound,
// the walk is exponential in that bound: the import ran for minutes.
const cyclicAllOfDoc = `openapi: 3.0.3
info: {title: t, version: 1.0.0}
servers: [{url: "https://api.example.test"}]
paths:
  /a:
    post:
      operationId: a
      requestBody:
        content:
          application/json:
            schema: {$ref: "#/components/schemas/A"}
      responses: {"200": {description: ok}}
components:
  schemas:
    A:
      required: [x]
      allOf:
        - $ref: "#/components/schemas/A"
        - $ref: "#/components/schemas/A"
        - $ref: "#/components/schemas/A"
        - $ref: "#/components/schemas/B"
      properties:
        x: {oneOf: [{$ref: "#/components/schemas/A"}, {$ref: "#/components/schemas/A"}, {$ref: "#/components/schemas/A"}]}
    B:
      allOf: [{$ref: "#/components/schemas/A"}, {$ref: "#/components/schemas/B"}]
      properties:
        y: {type: integer}
`

// TestImportCyclicSchemas checks a schema that names itself in allOf and
// oneOf imports promptly (each schema is entered once per walk), with the
// properties of every schema in the cycle.
func TestImportCyclicSchemas(t *testing.T) {
	type outcome struct {
		res *openapiimport.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := openapiimport.Import(openapiimport.Source{Data: []byte(cyclicAllOfDoc), Name: "cyclic.yaml"},
			openapiimport.Options{FQN: "local://example/cyclic"})
		done <- outcome{res, err}
	}()
	var o outcome
	select {
	case o = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("importing a self-referencing allOf did not finish in 20s")
	}
	if o.err != nil {
		t.Fatal(o.err)
	}
	ops := o.res.Spec.Tools[0].Operations
	if len(ops) != 1 {
		t.Fatalf("operations = %d, want 1", len(ops))
	}
	got := map[string]string{}
	for _, in := range ops[0].Inputs {
		got[in.Name] = fmt.Sprintf("%s required=%t", in.Type, in.Required)
	}
	want := map[string]string{"x": "object required=true", "y": "integer required=false"}
	if !maps.Equal(got, want) {
		t.Fatalf("inputs = %v, want %v", got, want)
	}
}

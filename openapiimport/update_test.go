package openapiimport_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/openapiimport"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// updateDoc describes three routes: one a hand-written spec declares under
// another name and template name, one whose operationId is a name the
// hand-written spec gives to another route, and one new.
const updateDoc = `openapi: 3.0.3
info: {title: t, version: 9.9.9}
servers: [{url: "https://api.example.test"}]
paths:
  /repos/{owner}/{name}/issues:
    get:
      operationId: issues/list-for-repo
      summary: List repository issues
      parameters:
        - {name: owner, in: path, required: true, schema: {type: string}}
        - {name: name, in: path, required: true, schema: {type: string}}
        - {name: labels, in: query, description: comma-separated labels, schema: {type: string}}
        - {name: page, in: query, schema: {type: integer}}
      responses: {"200": {description: ok}}
    delete:
      operationId: issues/delete-all
      responses: {"204": {description: gone}}
  /issues:
    get:
      operationId: issues/list
      summary: List the user's issues
      responses: {"200": {description: ok}}
`

// keptSpec is the hand-written spec the import updates.
const keptSpec = `{"schema_version": "aileron.connector.v1",
 "connector": {"fqn": "github://acme/aileron-connector-ex", "version": "0.4.0", "description": "hand-written"},
 "tools": [
  {"name": "ex", "description": "the example API", "operations": [
   {"name": "issues.list", "summary": "A repository's issues", "method": "GET", "path": "/repos/{owner}/{repo}/issues",
    "hosts": ["api.example.test"], "idempotency": "idempotent", "approval": "required", "credential": "bearer",
    "inputs": [{"name": "owner", "required": true}, {"name": "repo", "required": true},
               {"name": "labels", "type": "array", "description": "label names"}, {"name": "debug", "type": "boolean"}]},
   {"name": "issues.delete-all", "method": "DELETE", "path": "/repos/{owner}/{repo}/issues", "hosts": ["other.example.test"],
    "inputs": [{"name": "owner", "required": true}, {"name": "repo", "required": true}]},
   {"name": "git.info-refs", "method": "GET", "path": "/{owner}/{repo}/info/refs", "hosts": ["git.example.test"], "credential": "basic",
    "inputs": [{"name": "owner", "required": true}, {"name": "repo", "required": true}]}
  ]},
  {"name": "other", "operations": [{"name": "ping", "method": "GET", "path": "/ping", "hosts": ["other.example.test"]}]}
 ]}`

func parseSpec(t *testing.T, doc string) *policy.Spec {
	t.Helper()
	spec, _, err := policy.ParseSpec([]byte(doc))
	if err != nil {
		t.Fatalf("ParseSpec = %v", err)
	}
	return spec
}

func ops(spec *policy.Spec, tool string) map[string]policy.Operation {
	m := map[string]policy.Operation{}
	for _, tl := range spec.Tools {
		if tl.Name == tool {
			for _, op := range tl.Operations {
				m[op.Name] = op
			}
		}
	}
	return m
}

// TestUpdateKeepsNames checks the update rules of docs/import.md one by one.
func TestUpdateKeepsNames(t *testing.T) {
	src, err := openapiimport.ReadFile(writeDoc(t, map[string]string{"openapi.yaml": updateDoc}))
	if err != nil {
		t.Fatal(err)
	}
	kept := parseSpec(t, keptSpec)
	res, err := openapiimport.Import(src, openapiimport.Options{Update: kept, ApprovalFor: []string{"DELETE"}})
	if err != nil {
		t.Fatalf("Import = %v", err)
	}
	c := res.Spec.Connector
	if c.FQN != "github://acme/aileron-connector-ex" || c.Version != "0.4.0" || c.Description != "hand-written" {
		t.Errorf("connector = %+v, want the updated spec's FQN, version and description", c)
	}
	if len(res.Spec.Tools) != 2 || res.Spec.Tools[0].Name != "ex" || res.Spec.Tools[0].Description != "the example API" ||
		res.Spec.Tools[1].Name != "other" || len(res.Spec.Tools[1].Operations) != 1 {
		t.Fatalf("tools = %+v, want ex (updated, its description kept) then other (unchanged)", res.Spec.Tools)
	}
	got := ops(res.Spec, "ex")

	// The same route under other template names keeps its name and the
	// fields a person sets; the document gives path and inputs.
	list, ok := got["issues.list"]
	if !ok {
		t.Fatalf("operations %v lack issues.list", keys(got))
	}
	if _, ok := got["issues.list-for-repo"]; ok {
		t.Error("the route was imported a second time under the document's name")
	}
	if list.Path != "/repos/{owner}/{name}/issues" || list.Summary != "A repository's issues" || !list.Approval.IsRequired() || list.Credential != policy.CredentialBearer {
		t.Errorf("issues.list = %+v, want the document's path with the kept summary, approval and credential", list)
	}
	var names []string
	for _, in := range list.Inputs {
		names = append(names, in.Name)
		if in.Name == "labels" && (in.Type != policy.InputString || in.Description != "label names") {
			t.Errorf("labels = %+v, want the document's type and the kept description", in)
		}
	}
	if strings.Join(names, ",") != "owner,name,labels,page,debug" {
		t.Errorf("inputs = %v, want the document's, then the kept query input debug (not the kept template repo)", names)
	}

	// A route on another host is not the same route: the import's
	// operation is new, and the kept name wins.
	if del := got["issues.delete-all"]; del.Hosts[0] != "other.example.test" {
		t.Errorf("issues.delete-all = %+v, want the kept operation unchanged", del)
	}
	if del := got["issues.delete-all-2"]; del.Hosts[0] != "api.example.test" || !del.Approval.IsRequired() {
		t.Errorf("issues.delete-all-2 = %+v, want the imported DELETE with approval required", del)
	}
	// The document's issues.list is another route: it gets a suffix.
	if l := got["issues.list-2"]; l.Path != "/issues" {
		t.Errorf("issues.list-2 = %+v, want GET /issues", l)
	}
	notes := ""
	for _, n := range res.Notes {
		notes += n.String() + "\n"
	}
	if !strings.Contains(notes, `GET /issues: operation name "issues.list" is the updated spec's name of another route; this one is "issues.list-2"`) {
		t.Errorf("notes = %q, want the renaming reported", notes)
	}

	// What the document does not describe is carried over unchanged.
	if !equalJSON(t, got["git.info-refs"], ops(kept, "ex")["git.info-refs"]) {
		t.Errorf("git.info-refs = %+v, want it unchanged", got["git.info-refs"])
	}
	if res.Matched != 1 || len(res.Carried) != 2 || res.Imported != 3 {
		t.Errorf("Matched %d, Carried %v, Imported %d; want 1, [delete-all git.info-refs], 3", res.Matched, res.Carried, res.Imported)
	}

	// A re-import onto its own result changes nothing.
	again, err := openapiimport.Import(src, openapiimport.Options{Update: res.Spec, ApprovalFor: []string{"DELETE"}})
	if err != nil || !bytes.Equal(again.JSON, res.JSON) {
		t.Errorf("re-importing onto the result gave different bytes (err %v):\n%s\nwant\n%s", err, again.JSON, res.JSON)
	}
}

// TestUpdateApprovalStricter checks approval stays required when either
// side requires it, and that --credential overrides the kept credential.
func TestUpdateApprovalStricter(t *testing.T) {
	src, err := openapiimport.ReadFile(writeDoc(t, map[string]string{"openapi.yaml": okDoc}))
	if err != nil {
		t.Fatal(err)
	}
	spec := func(approval string) *policy.Spec {
		return parseSpec(t, `{"schema_version": "aileron.connector.v1", "connector": {"fqn": "local://me/items"},
		 "tools": [{"name": "items", "operations": [{"name": "item", "method": "GET", "path": "/v1/items/{x}", "hosts": ["api.example.test"],
		  "approval": "`+approval+`", "credential": "basic", "inputs": [{"name": "x", "required": true}]}]}]}`)
	}
	for _, tc := range []struct {
		kept        string
		approvalFor []string
		want        policy.Approval
	}{
		{"required", nil, policy.ApprovalRequired},
		{"none", []string{"GET"}, policy.ApprovalRequired},
		{"none", nil, policy.ApprovalNone},
	} {
		res, err := openapiimport.Import(src, openapiimport.Options{Update: spec(tc.kept), ApprovalFor: tc.approvalFor, Credential: policy.CredentialBearer})
		if err != nil {
			t.Fatalf("Import = %v", err)
		}
		op := res.Spec.Tools[0].Operations[0]
		if op.Name != "item" || op.Approval != tc.want || op.Credential != policy.CredentialBearer {
			t.Errorf("kept approval %s, --approval-for %v: %s approval %q credential %q, want item %q bearer", tc.kept, tc.approvalFor, op.Name, op.Approval, op.Credential, tc.want)
		}
	}
}

// TestUpdateErrors checks an update of another connector, and a kept field
// the document's route makes invalid, are refused with the fix.
func TestUpdateErrors(t *testing.T) {
	src, err := openapiimport.ReadFile(writeDoc(t, map[string]string{"openapi.yaml": okDoc}))
	if err != nil {
		t.Fatal(err)
	}
	kept := parseSpec(t, `{"schema_version": "aileron.connector.v1", "connector": {"fqn": "local://me/items"},
	 "tools": [{"name": "items", "operations": [{"name": "item", "method": "GET", "path": "/v1/items/{item}", "hosts": ["api.example.test"],
	  "inputs": [{"name": "item", "required": true}], "audit": [{"name": "item", "source": "path.item"}]}]}]}`)
	if _, err := openapiimport.Import(src, openapiimport.Options{FQN: "local://me/other", Update: kept}); err == nil || !strings.Contains(err.Error(), `--fqn "local://me/other" differs from the FQN "local://me/items"`) {
		t.Errorf("Import(other FQN) = %v, want the FQN mismatch", err)
	}
	_, err = openapiimport.Import(src, openapiimport.Options{Update: kept})
	if err == nil || !strings.Contains(err.Error(), "--update") || !strings.Contains(err.Error(), "path.item") {
		t.Errorf("Import(audit of a renamed template) = %v, want an error naming the kept audit source", err)
	}
}

func keys(m map[string]policy.Operation) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(ja, jb)
}

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/learn"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// TestDraftOpenAPI drafts a learn record of petstore traffic with the
// OpenAPI Initiative's petstore description: the requests it documents are
// drafted as its operations (operationIds, template names, inputs); the one
// it does not is inferred.
func TestDraftOpenAPI(t *testing.T) {
	home := t.TempDir()
	st, err := learn.OpenStore(home)
	if err != nil {
		t.Fatal(err)
	}
	const id = "ses_0123456789abcdef01234567"
	if err := st.Start(learn.Header{SessionID: id, Hosts: []string{"api.petstore.test"}, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	js := "application/json"
	for _, r := range []learn.Request{
		{Method: "GET", Host: "api.petstore.test:443", Path: "/v1/pets", Query: []learn.Field{{Name: "limit", Type: "integer"}}, Status: 200, ResponseContentType: js},
		{Method: "GET", Host: "api.petstore.test:443", Path: "/v1/pets/17", Status: 200, ResponseContentType: js},
		{Method: "GET", Host: "api.petstore.test:443", Path: "/v1/pets/42", Status: 200, ResponseContentType: js},
		{Method: "POST", Host: "api.petstore.test:443", Path: "/v1/pets", Body: []learn.Field{{Name: "id", Type: "integer"}, {Name: "name", Type: "string"}}, ContentType: js, Status: 201},
		{Method: "GET", Host: "api.petstore.test:443", Path: "/v1/stores/3", Status: 200, ResponseContentType: js},
		{Method: "GET", Host: "api.petstore.test:443", Path: "/v1/stores/8", Status: 200, ResponseContentType: js},
	} {
		r.Time = time.Now()
		if err := st.Append(id, r); err != nil {
			t.Fatal(err)
		}
	}
	st.Close(id)

	stdout, stderr, code := runCLI(t, home, "", nil, "connector", "draft", "--session", "LAST", "--fqn", "local://test/petstore",
		"--openapi", importTestdata+"petstore-v3.0.yaml", "--keep")
	if code != exitOK {
		t.Fatalf("draft: exit %d\n%s", code, stderr)
	}
	spec, _, err := policy.ParseSpec([]byte(stdout))
	if err != nil {
		t.Fatalf("the draft is not a valid spec: %v\n%s", err, stdout)
	}
	got := map[string]string{}
	for _, op := range spec.Tools[0].Operations {
		var in []string
		for _, i := range op.Inputs {
			in = append(in, i.Name)
		}
		got[op.Name] = op.Method + " " + op.Path + " [" + strings.Join(in, " ") + "]"
	}
	for name, want := range map[string]string{
		"listPets":    "GET /v1/pets [limit]",
		"showPetById": "GET /v1/pets/{petId} [petId]",
		"createPets":  "POST /v1/pets [id name tag]",
	} {
		if got[name] != want {
			t.Errorf("operation %s = %q, want %q (the document's)", name, got[name], want)
		}
	}
	if len(got) != 4 {
		t.Errorf("drafted %d operations, want 4 (3 documented, 1 inferred): %v", len(got), got)
	}
	inferred := false
	for name, v := range got {
		if strings.HasPrefix(v, "GET /v1/stores/{") {
			inferred = true
			if strings.Contains(name, "Pet") {
				t.Errorf("the undocumented request took a documented name %s", name)
			}
		}
	}
	if !inferred {
		t.Errorf("GET /v1/stores/N was not inferred: %v", got)
	}

	// Without the description, the same record is inferred alone.
	stdout, _, code = runCLI(t, home, "", nil, "connector", "draft", "--session", "LAST", "--fqn", "local://test/petstore", "--keep")
	if code != exitOK || strings.Contains(stdout, "showPetById") {
		t.Errorf("draft without --openapi: exit %d, names from the document present", code)
	}

	_, stderr, code = runCLI(t, home, "", nil, "connector", "draft", "--session", "LAST", "--fqn", "local://test/petstore", "--openapi", importTestdata+"missing.yaml")
	if code != exitFailure || !strings.Contains(stderr, "--openapi: reading the description") {
		t.Errorf("missing description: exit %d, stderr %q", code, stderr)
	}
}

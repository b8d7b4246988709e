package policy

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

func TestParseSpecSyntaxErrors(t *testing.T) {
	tests := []struct {
		name, doc    string
		line, column int
		msg          string
	}{
		{"empty", ``, 1, 1, "unexpected end of JSON input"},
		{"missing colon", `{"a" 1}`, 1, 6, "invalid character '1' after object key"},
		{"truncated", `{"a":`, 1, 6, "unexpected end of JSON input"},
		{"trailing data", `{} x`, 1, 4, "invalid character 'x' after top-level value"},
		{"second line", "{\n  \"schema_version\": \"x\",\n  \"tools\": [1,,]\n}", 3, 15, "invalid character ',' looking for beginning of value"},
		{"columns count characters", `{"é": x}`, 1, 7, "invalid character 'x' looking for beginning of value"},
		{"trailing comma", "{\"a\": 1,\n}", 2, 1, "invalid character '}' looking for beginning of object key string"},
		{"bad escape", `{"a": "\x"}`, 1, 9, "invalid character 'x' in string escape code"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec, _, err := ParseSpec([]byte(tc.doc))
			if spec != nil {
				t.Errorf("ParseSpec() spec != nil")
			}
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("ParseSpec() error = %v, want a *SyntaxError", err)
			}
			if se.Line != tc.line || se.Column != tc.column || se.Msg != tc.msg {
				t.Errorf("SyntaxError = line %d, column %d, %q; want line %d, column %d, %q", se.Line, se.Column, se.Msg, tc.line, tc.column, tc.msg)
			}
			if want := "line " + strconv.Itoa(tc.line) + ", column " + strconv.Itoa(tc.column) + ": " + tc.msg; se.Error() != want {
				t.Errorf("Error() = %q, want %q", se.Error(), want)
			}
			var jse *json.SyntaxError
			if !errors.As(err, &jse) {
				t.Errorf("errors.As(*json.SyntaxError) = false, want the cause kept")
			}
		})
	}
}

// TestParseSpecNormalizes checks the normalized values ParseSpec stores.
func TestParseSpecNormalizes(t *testing.T) {
	doc := `{"schema_version": "aileron.connector.v1",
	  "connector": {"fqn": "GitHub://Acme/Repo", "version": "2.0.0-beta.1", "description": "d"},
	  "tools": [{"name": "Ex", "description": "tool", "operations": [
	    {"name": "op", "summary": "s", "description": "long", "method": "post", "path": "/v1/{id}",
	     "hosts": ["API.Example.COM.", "api.example.com:8443", "[2001:DB8:0::1]:443", "10.0.0.1"],
	     "idempotency": "idempotent", "approval": "required", "credential": "bearer",
	     "inputs": [{"name": "id", "required": true}, {"name": "n", "type": "integer", "description": "count"}],
	     "audit": [{"name": "item", "source": "path.id", "redact": true, "description": "the item"}]},
	    {"name": "bare", "inputs": [], "audit": [], "hosts": []}
	  ]}]}`
	spec, _, err := ParseSpec([]byte(doc))
	if err != nil {
		t.Fatalf("ParseSpec() error: %v", err)
	}
	want := &Spec{
		SchemaVersion: SchemaVersion,
		Connector:     ConnectorMeta{FQN: "github://Acme/Repo", Version: "2.0.0-beta.1", Description: "d"},
		Tools: []Tool{{Name: "Ex", Description: "tool", Operations: []Operation{
			{
				Name: "op", Summary: "s", Description: "long", Method: "POST", Path: "/v1/{id}",
				Hosts:       []string{"api.example.com", "api.example.com:8443", "[2001:db8::1]:443", "10.0.0.1"},
				Idempotency: Idempotent, Approval: ApprovalRequired, Credential: CredentialBearer,
				Inputs: []Input{{Name: "id", Type: InputString, Required: true}, {Name: "n", Type: InputInteger, Description: "count"}},
				Audit:  []AuditField{{Name: "item", Source: "path.id", Redact: true, Description: "the item"}},
			},
			{Name: "bare"},
		}}},
	}
	if !reflect.DeepEqual(spec, want) {
		got, _ := json.MarshalIndent(spec, "", "  ")
		exp, _ := json.MarshalIndent(want, "", "  ")
		t.Errorf("ParseSpec() =\n%s\nwant\n%s", got, exp)
	}
	if !spec.Tools[0].Operations[0].IsProxyable() || spec.Tools[0].Operations[1].IsProxyable() {
		t.Errorf("IsProxyable() = %v, %v; want true, false", spec.Tools[0].Operations[0].IsProxyable(), spec.Tools[0].Operations[1].IsProxyable())
	}
}

// TestParseSpecNoDoubleReports checks a field with the wrong type is
// reported once, not also as missing or invalid.
func TestParseSpecNoDoubleReports(t *testing.T) {
	doc := `{"schema_version": "aileron.connector.v1", "connector": {"fqn": ["x"]},
	  "tools": [{"name": 1, "operations": [{"name": {}, "method": 2, "path": 3, "hosts": 4, "inputs": 5, "audit": 6}]}]}`
	_, _, err := ParseSpec([]byte(doc))
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("ParseSpec() error = %v, want *ValidationError", err)
	}
	want := []string{
		"connector.fqn: must be a string, got array",
		"tools[0].name: must be a string, got number",
		"tools[0].operations[0].name: must be a string, got object",
		"tools[0].operations[0].method: must be a string, got number",
		"tools[0].operations[0].path: must be a string, got number",
		"tools[0].operations[0].hosts: must be an array, got number",
		"tools[0].operations[0].inputs: must be an array, got number",
		"tools[0].operations[0].audit: must be an array, got number",
	}
	if got := problemStrings(ve.Problems); !reflect.DeepEqual(got, want) {
		t.Errorf("problems =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestParseSpecDuplicateKeys(t *testing.T) {
	doc := `{"schema_version": "aileron.connector.v1", "connector": {"fqn": "github://a/b", "fqn": "github://c/d"},
	  "tools": [{"name": "t", "operations": [{"name": "o", "odd key": 1, "odd key": 2}]}]}`
	_, warnings, err := ParseSpec([]byte(doc))
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("ParseSpec() error = %v, want *ValidationError", err)
	}
	want := []string{
		`connector.fqn: duplicate key "fqn"; JSON readers disagree on which value wins, so keep only one`,
		`tools[0].operations[0]["odd key"]: duplicate key "odd key"; JSON readers disagree on which value wins, so keep only one`,
	}
	if got := problemStrings(ve.Problems); !reflect.DeepEqual(got, want) {
		t.Errorf("problems =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(warnings) != 2 || warnings[0].Path != `tools[0].operations[0]["odd key"]` {
		t.Errorf("warnings = %v, want the unknown odd key and not proxyable", warnings)
	}
}

func TestProblemStrings(t *testing.T) {
	if got := (Problem{Path: "tools[0].name", Message: "required"}).String(); got != "tools[0].name: required" {
		t.Errorf("Problem.String() = %q", got)
	}
	if got := (Problem{Message: "the spec must be a JSON object, got array"}).String(); got != "the spec must be a JSON object, got array" {
		t.Errorf("Problem.String() without path = %q", got)
	}
	ve := &ValidationError{Problems: []Problem{{Path: "a", Message: "x"}, {Path: "b[1]", Message: "y"}}}
	if got := ve.Error(); got != "a: x\nb[1]: y" {
		t.Errorf("ValidationError.Error() = %q, want one problem per line", got)
	}
}

// TestManyErrorsGolden checks the complete problem and warning list of the
// many-errors fixture (a copy of shared/fixtures, testdata/fixtures) against testdata/many-errors.golden.
func TestManyErrorsGolden(t *testing.T) {
	data, err := os.ReadFile("testdata/fixtures/invalid/many-errors.aileron.connector.v1.json")
	if err != nil {
		t.Fatal(err)
	}
	_, warnings, err := ParseSpec(data)
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("ParseSpec() error = %v, want *ValidationError", err)
	}
	var b strings.Builder
	for _, p := range ve.Problems {
		b.WriteString("error: " + p.String() + "\n")
	}
	for _, p := range warnings {
		b.WriteString("warning: " + p.String() + "\n")
	}
	testkit.Golden(t, filepath.Join("testdata", "many-errors.golden"), []byte(b.String()))
}

// TestExampleSpecs checks the specs shipped in configs/connectors are valid
// and proxyable.
func TestExampleSpecs(t *testing.T) {
	files, err := filepath.Glob("../configs/connectors/*.aileron.connector.v1.json")
	if err != nil || len(files) < 3 {
		t.Fatalf("example specs = %v (%v), want at least demo, github and google", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			spec, warnings, err := ParseSpec(data)
			if err != nil {
				t.Fatalf("ParseSpec() error:\n%v", err)
			}
			if len(warnings) > 0 {
				t.Errorf("ParseSpec() warnings = %v, want none in an example", warnings)
			}
			for _, tool := range spec.Tools {
				for _, op := range tool.Operations {
					if !op.IsProxyable() {
						t.Errorf("%s %s is not proxyable", tool.Name, op.Name)
					}
				}
			}
		})
	}
}

// TestDemoSpec pins what the demo and its docs rely on.
func TestDemoSpec(t *testing.T) {
	data, err := os.ReadFile("../configs/connectors/demo.aileron.connector.v1.json")
	if err != nil {
		t.Fatal(err)
	}
	spec, _, err := ParseSpec(data)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Connector.FQN != "local://aileron/demo" || len(spec.Tools) != 1 || spec.Tools[0].Name != "demo" {
		t.Fatalf("demo spec = %s %v, want local://aileron/demo with tool demo", spec.Connector.FQN, spec.Tools)
	}
	var ops []string
	for _, op := range spec.Tools[0].Operations {
		ops = append(ops, op.Method+" "+op.Path+" "+op.Approval.String()+" "+strings.Join(op.Hosts, ","))
	}
	want := []string{
		"GET /v1/items none api.demo.localhost:8443",
		"GET /v1/items/{id} none api.demo.localhost:8443",
		"POST /v1/items none api.demo.localhost:8443",
		"PUT /v1/items/{id} required api.demo.localhost:8443",
	}
	if !reflect.DeepEqual(ops, want) {
		t.Errorf("demo operations = %q, want %q", ops, want)
	}
}

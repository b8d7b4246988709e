package policy

import (
	"errors"
	"strings"
	"testing"
)

// previewOps is a POST operation with the given approval_preview and a GET
// and a DELETE operation it may name.
func previewOps(preview string) string {
	return specDoc(`{"name": "files.move", "method": "POST", "path": "/files/{fileId}/move", "hosts": ["api.example.com"],
   "inputs": [{"name": "fileId", "required": true}, {"name": "to"}], "approval": "required",
   "approval_preview": ` + preview + `},
  {"name": "files.get", "method": "GET", "path": "/files/{file_id}", "hosts": ["api.example.com"],
   "inputs": [{"name": "file_id", "required": true}, {"name": "fields"}]},
  {"name": "files.delete", "method": "DELETE", "path": "/files/{file_id}", "hosts": ["api.example.com"],
   "inputs": [{"name": "file_id", "required": true}]}`)
}

func TestApprovalPreviewRules(t *testing.T) {
	tests := []struct{ name, preview, path, want string }{
		{"fetch of a write", `{"fetch": {"operation": "files.delete", "args": {"file_id": "{path.fileId}"}}}`,
			"tools[0].operations[0].approval_preview.fetch.operation", "only a GET or HEAD operation"},
		{"unknown operation", `{"fetch": {"operation": "files.nope", "args": {}}}`,
			"tools[0].operations[0].approval_preview.fetch.operation", `declares no operation "files.nope"`},
		{"empty operation", `{"fetch": {"operation": ""}}`,
			"tools[0].operations[0].approval_preview.fetch.operation", "required"},
		{"unknown arg", `{"fetch": {"operation": "files.get", "args": {"file_id": "{path.fileId}", "bogus": "x"}}}`,
			"tools[0].operations[0].approval_preview.fetch.args.bogus", `not an input of operation "files.get"`},
		{"missing template", `{"fetch": {"operation": "files.get", "args": {"fields": "name"}}}`,
			"tools[0].operations[0].approval_preview.fetch.args", "needs its path template(s) file_id"},
		{"bad reference", `{"fetch": {"operation": "files.get", "args": {"file_id": "{header.x}"}}}`,
			"tools[0].operations[0].approval_preview.fetch.args.file_id", "must be a literal without braces"},
		{"partial reference", `{"fetch": {"operation": "files.get", "args": {"file_id": "x{path.fileId}"}}}`,
			"tools[0].operations[0].approval_preview.fetch.args.file_id", "must be a literal without braces"},
		{"unknown template", `{"fetch": {"operation": "files.get", "args": {"file_id": "{path.nope}"}}}`,
			"tools[0].operations[0].approval_preview.fetch.args.file_id", "which the operation's path does not have"},
		{"render not a string", `{"fetch": {"operation": "files.get", "args": {"file_id": "{path.fileId}"}, "render": {"Name": 3}}}`,
			"tools[0].operations[0].approval_preview.fetch.render.Name", "must be a string"},
		{"duplicate field", `{"fields": ["to", "to"]}`,
			"tools[0].operations[0].approval_preview.fields[1]", `duplicate field "to"`},
		{"field not a string", `{"fields": [1]}`,
			"tools[0].operations[0].approval_preview.fields[0]", "must be a field name string"},
		{"not an object", `[]`, "tools[0].operations[0].approval_preview", "must be an object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ParseSpec([]byte(previewOps(tc.preview)))
			if err == nil {
				t.Fatalf("ParseSpec accepted %s", tc.preview)
			}
			var found bool
			for _, p := range problemsOf(t, err) {
				if p.Path == tc.path && strings.Contains(p.Message, tc.want) {
					found = true
				}
			}
			if !found {
				t.Errorf("ParseSpec(%s) = %v, want a problem at %s containing %q", tc.preview, err, tc.path, tc.want)
			}
		})
	}
}

func TestApprovalPreviewCompiles(t *testing.T) {
	spec, warns, err := ParseSpec([]byte(previewOps(`{"fields": ["to"], "fetch": {"operation": "files.get",
	  "args": {"file_id": "{path.fileId}", "fields": "name,parents"}, "render": {"Name": "name", "Folders": "parents"}}}`)))
	if err != nil || len(warns) > 0 {
		t.Fatalf("ParseSpec: %v, warnings %v", err, warns)
	}
	snap, err := Compile([]Connector{{Spec: spec, Hash: "sha256:x"}})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	m, err := snap.Lookup(NewScope([]string{"github://acme/example"}), "github://acme/example", "ex", "files.move")
	if err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	p := m.Compiled.Preview()
	if !p.HasFetch() || p.FetchTool != "ex" || p.FetchOperation != "files.get" {
		t.Fatalf("Preview() = %+v, want a fetch of ex files.get", p)
	}
	if len(p.Fields) != 1 || p.Fields[0] != "to" {
		t.Errorf("Fields = %q, want [to]", p.Fields)
	}
	want := []PreviewArg{{Input: "fields", Kind: PreviewLiteral, Name: "name,parents"}, {Input: "file_id", Kind: PreviewFromPath, Name: "fileId"}}
	if len(p.Args) != 2 || p.Args[0] != want[0] || p.Args[1] != want[1] {
		t.Errorf("Args = %+v, want %+v", p.Args, want)
	}
	if len(p.Render) != 2 || p.Render[0] != (RenderField{"Folders", "parents"}) || p.Render[1] != (RenderField{"Name", "name"}) {
		t.Errorf("Render = %+v, want sorted by label", p.Render)
	}

	// Compile checks on its own too: a spec built in code that fetches a
	// write is refused.
	spec.Tools[0].Operations[0].ApprovalPreview.Fetch.Operation = "files.delete"
	if _, err := Compile([]Connector{{Spec: spec, Hash: "sha256:x"}}); err == nil || !strings.Contains(err.Error(), "only a GET or HEAD") {
		t.Errorf("Compile of a write fetch = %v, want a refusal", err)
	}
}

func TestParsePreviewArg(t *testing.T) {
	tests := []struct {
		in   string
		kind PreviewSourceKind
		name string
		ok   bool
	}{
		{"plain", PreviewLiteral, "plain", true},
		{"{path.id}", PreviewFromPath, "id", true},
		{"{query.page[size]}", PreviewFromQuery, "page[size]", true},
		{"{body.message.to}", PreviewFromBody, "message.to", true},
		{"{body.}", PreviewFromBody, "", false},
		{"{body..x}", PreviewFromBody, "", false},
		{"{path.id", PreviewLiteral, "", false},
		{"a{b}", PreviewLiteral, "a{b}", false},
		{"{args.x}", PreviewLiteral, "", false},
	}
	for _, tc := range tests {
		kind, name, ok := ParsePreviewArg(tc.in)
		if kind != tc.kind || name != tc.name || ok != tc.ok {
			t.Errorf("ParsePreviewArg(%q) = %v, %q, %v, want %v, %q, %v", tc.in, kind, name, ok, tc.kind, tc.name, tc.ok)
		}
	}
}

func problemsOf(t *testing.T, err error) []Problem {
	t.Helper()
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error %v is not a *ValidationError", err)
	}
	return ve.Problems
}

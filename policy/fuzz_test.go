package policy

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/mod/semver"
)

// specFuzzSeeds returns the example and fixture specs plus documents that
// reach every branch of the validator; testdata/fuzz/FuzzParseSpec holds
// more.
func specFuzzSeeds(f *testing.F) [][]byte {
	var seeds [][]byte
	for _, pattern := range []string{
		"../configs/connectors/*.json",
		"testdata/fixtures/*.json",
		"testdata/fixtures/invalid/*.json",
	} {
		files, _ := filepath.Glob(pattern)
		for _, p := range files {
			data, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			seeds = append(seeds, data)
		}
	}
	for _, doc := range []string{
		``, `null`, `[]`, `{}`, `{"a" 1}`, `{"tools": [null]}`,
		specDoc(opWith("")),
		specDoc(opPath("/a/{a}/b/{b}/%20x;y/..;z")),
		specDoc(opHost(`"[::ffff:10.0.0.1]:8443"`)),
		specDoc(opWith(`, "audit": [{"name": "a", "source": "args.id", "redact": true}, {"name": "b", "source": "path.id"}, {"name": "c", "source": "query.page[size]"}]`)),
		specDoc(`{"name": "op", "method": "get", "path": "/x", "hosts": ["A.example.", "a.example:443"], "inputs": [{"name": "i", "type": "object"}]}`),
		specTools(`{"name": "Gh", "operations": [{"name": "o"}]}, {"name": "gh", "operations": [{"name": "o"}]}`),
		specConnector(`{"fqn": "HUB://a/b/c", "version": "1.0.0-rc.1+b", "x": {"fqn": 1, "fqn": 2}}`),
	} {
		seeds = append(seeds, []byte(doc))
	}
	return seeds
}

// FuzzParseSpec checks that ParseSpec never panics, that every failure is a
// *SyntaxError or a non-empty *ValidationError, and that a spec that parses
// is a fixed point: re-marshalled and parsed again it gives the same Spec,
// and the matcher compiles it.
func FuzzParseSpec(f *testing.F) {
	for _, s := range specFuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, warnings, err := ParseSpec(data)
		if err != nil {
			if spec != nil {
				t.Fatalf("ParseSpec() returned a spec with error %v", err)
			}
			var ve *ValidationError
			var se *SyntaxError
			switch {
			case errors.As(err, &ve):
				if len(ve.Problems) == 0 {
					t.Fatal("ValidationError with no problems")
				}
				for _, p := range ve.Problems {
					if p.Message == "" {
						t.Fatalf("problem at %q has no message", p.Path)
					}
				}
			case errors.As(err, &se):
				if se.Line < 1 || se.Column < 1 {
					t.Fatalf("SyntaxError position %d:%d", se.Line, se.Column)
				}
			default:
				t.Fatalf("ParseSpec() error %T %v, want *ValidationError or *SyntaxError", err, err)
			}
			return
		}
		for _, w := range warnings {
			if w.Message == "" {
				t.Fatalf("warning at %q has no message", w.Path)
			}
		}
		again, err := json.Marshal(spec)
		if err != nil {
			t.Fatalf("json.Marshal(spec) error: %v", err)
		}
		spec2, _, err := ParseSpec(again)
		if err != nil {
			t.Fatalf("re-parsing the marshalled spec failed:\n%v\nspec: %s", err, again)
		}
		if !reflect.DeepEqual(spec, spec2) {
			t.Fatalf("round trip changed the spec:\nfirst:  %#v\nsecond: %#v", spec, spec2)
		}
		for _, tool := range spec.Tools {
			if !IsSafeCommandName(ToolCommand(tool.Name)) {
				t.Fatalf("valid spec has unsafe command %q", ToolCommand(tool.Name))
			}
			for _, op := range tool.Operations {
				for _, h := range op.Hosts {
					if NormalizeHost(h) == "" {
						t.Fatalf("valid spec host %q does not normalize", h)
					}
				}
			}
		}
		if _, err := Compile([]Connector{{Spec: spec, Hash: "sha256:fuzz"}}); err != nil {
			t.Fatalf("Compile() of a valid spec failed: %v\nspec: %s", err, again)
		}
	})
}

// FuzzParseFQN checks FQN parsing never panics, that String is a fixed
// point, and that versions this package accepts are valid semver.
func FuzzParseFQN(f *testing.F) {
	for _, s := range []string{
		"github://acme/aileron-connector-google", "GitLab://g/p/s/t", "local://aileron/demo", "hub://a/b@1.0.0",
		"https://a/b", "github://a", "github://a//b", "github://./b", "github://a/b?x", "",
		"1.2.3", "1.0.0-rc.1+build.5", "01.2.3", "1.2.3-01",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if IsValidVersion(s) && !semver.IsValid("v"+s) {
			t.Fatalf("IsValidVersion(%q) but x/mod/semver disagrees", s)
		}
		fqn, err := ParseFQN(s)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		again, err := ParseFQN(fqn.String())
		if err != nil || !reflect.DeepEqual(again, fqn) || again.String() != fqn.String() {
			t.Fatalf("ParseFQN(%q).String() = %q does not round trip: %#v, %v", s, fqn.String(), again, err)
		}
		if !strings.EqualFold(fqn.String(), s) {
			t.Fatalf("ParseFQN(%q).String() = %q, want the input up to scheme case", s, fqn.String())
		}
	})
}

// FuzzSpecFields builds well-formed documents from fuzzed field values, so
// the fuzzer explores the validation rules rather than JSON syntax, and
// checks the properties of FuzzParseSpec on them.
func FuzzSpecFields(f *testing.F) {
	f.Add("ex", "op", "GET", "/items/{id}", "api.example.com", "id", "path.id", "github://acme/example", "1.0.0")
	f.Add("Gh-API", "issues.list", "get", "/repos/{owner}/{repo}/issues", "API.GitHub.com.:443", "owner", "args.owner", "GitHub://Acme/X", "")
	f.Add("a:b", "o p", "FETCH", "/a/../b", "https://x/y", "a b", "body.x", "https://a/b@1", "v1")
	f.Add("x", "y", "PUT", "/%2e%2E;x/{}", "[::1]:8443", "x", "query.page[size]", "hub://a/b/c", "1.0.0-rc.1+b")
	f.Add("gemini", "models.stream", "POST", "/v1beta/models/{model}:streamGenerateContent", "generativelanguage.googleapis.com", "model", "path.model", "github://acme/g", "1.0.0")
	f.Fuzz(func(t *testing.T, tool, op, method, path, host, input, source, fqn, version string) {
		doc := map[string]any{
			"schema_version": SchemaVersion,
			"connector":      map[string]any{"fqn": fqn, "version": version},
			"tools": []any{map[string]any{
				"name": tool,
				"operations": []any{map[string]any{
					"name": op, "method": method, "path": path, "hosts": []any{host},
					"inputs": []any{map[string]any{"name": input}},
					"audit":  []any{map[string]any{"name": "field", "source": source}},
				}},
			}},
		}
		data, err := json.Marshal(doc)
		if err != nil {
			t.Fatalf("json.Marshal of string fields failed: %v", err)
		}
		spec, _, err := ParseSpec(data)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) == 0 {
				t.Fatalf("ParseSpec() error = %v, want a *ValidationError", err)
			}
			return
		}
		again, _ := json.Marshal(spec)
		spec2, _, err := ParseSpec(again)
		if err != nil || !reflect.DeepEqual(spec, spec2) {
			t.Fatalf("round trip failed: %v\n%s", err, again)
		}
		if !IsSafeCommandName(ToolCommand(spec.Tools[0].Name)) {
			t.Fatalf("unsafe command %q accepted", ToolCommand(spec.Tools[0].Name))
		}
		if _, err := Compile([]Connector{{Spec: spec, Hash: "sha256:fuzz"}}); err != nil {
			t.Fatalf("Compile() of a valid spec failed: %v\nspec: %s", err, again)
		}
	})
}

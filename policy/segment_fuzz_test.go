package policy

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzSegmentGrammar checks that spec validation and request matching apply
// one segment grammar: a literal segment validation accepts is a segment a
// request may send, the request is allowed for that operation (compilation
// and matching canonicalise it identically), and a segment validation
// refuses is refused in requests too, so no operation could ever match it.
func FuzzSegmentGrammar(f *testing.F) {
	for _, s := range []string{"items", "a[1]", "a%5B1%5D", "%7E", "~", "a;b", "..", "%2e", "a%2Fb", "a%5Cb", `a\b`, "a%00b",
		"a%", "a%zz", "%2541", "é", "%C3%A9", "a b", "a\"b", "a|b", "a^b", "a`b", "<x>", "a:b", "a@b", "*", "$&'()+,=", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, seg string) {
		if strings.ContainsAny(seg, "/{}?#") || !utf8.ValidString(seg) {
			return // separators, templates, queries: not one literal segment
		}
		path := "/items/" + seg
		doc, _ := json.Marshal(map[string]any{
			"schema_version": SchemaVersion,
			"connector":      map[string]any{"fqn": "github://acme/seg", "version": "1.0.0"},
			"tools": []any{map[string]any{"name": "t", "operations": []any{
				map[string]any{"name": "op", "method": "GET", "path": path, "hosts": []string{"api.example.com"}},
			}}},
		})
		spec, _, err := ParseSpec(doc)
		_, problem := inspectPath(path)
		if (err == nil) != (problem == "") {
			t.Fatalf("segment %q: validation error %v, request problem %q: the grammars disagree", seg, err, problem)
		}
		if err != nil {
			return
		}
		snap, err := Compile([]Connector{{Spec: spec}})
		if err != nil {
			t.Fatalf("Compile of a valid spec with path %q: %v", path, err)
		}
		d := snap.Decide(NewScope([]string{"github://acme/seg"}), Request{Method: "GET", Host: "api.example.com:443", Path: path})
		if !d.Allow || d.Match == nil || d.Match.Compiled.Operation().Name != "op" {
			t.Fatalf("Decide(GET %s) = %+v; the spec declares that exact path", path, d)
		}
	})
}

// TestSegmentBrackets pins the resolved disagreement: '[' and ']' were
// accepted in requests but refused in spec literals; both accept them now,
// and the raw and percent-encoded spellings match the same operation.
func TestSegmentBrackets(t *testing.T) {
	spec, _, err := ParseSpec([]byte(specDoc(opPath("/a[1]"))))
	if err != nil {
		t.Fatalf("ParseSpec(path /a[1]) error = %v", err)
	}
	snap, err := Compile([]Connector{{Spec: spec}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/a[1]", "/a%5B1%5D"} {
		d := snap.Decide(NewScope([]string{spec.Connector.FQN}), Request{Method: "GET", Host: "api.example.com:443", Path: p})
		if !d.Allow {
			t.Errorf("Decide(GET %s) = %s (%s), want allowed", p, d.Reason, d.Message)
		}
	}
}

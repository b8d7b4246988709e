package learn

import (
	"slices"
	"strings"
	"testing"
)

var jsonTypes = []string{TypeString, TypeInteger, TypeNumber, TypeBoolean, TypeArray, TypeObject, TypeNull}

// FuzzBodyKeys: no panic, every key is typed with a JSON type, no key twice.
func FuzzBodyKeys(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":"x"}`, `{"a":{"b":[1,2]},"c":null}`, `{"a":1,"b":"tr`, `[]`, `{`, `{"a"`, `{"a":1,}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		keys := BodyKeys(body)
		seen := map[string]bool{}
		for _, k := range keys {
			if !slices.Contains(jsonTypes, k.Type) {
				t.Fatalf("BodyKeys(%q): key %q has type %q", body, k.Name, k.Type)
			}
			if seen[k.Name] {
				t.Fatalf("BodyKeys(%q): key %q twice", body, k.Name)
			}
			seen[k.Name] = true
		}
	})
}

// FuzzDraft feeds paths (separated by newlines, "METHOD /path") through
// template inference: no panic, the draft validates (Draft checks), and every
// request is placed by exactly the operations drafted or listed unplaced.
func FuzzDraft(f *testing.F) {
	f.Add("GET /items/1\nGET /items/2\nDELETE /items/2\nGET /users/a\nGET /users/b\nGET /users/c")
	f.Add("GET /\nPOST /a/b/c\nGET /a/{b}\nGET /a/%7B\nGET /x/3f2504e0-4f89-11d3-9a0c-0305e82c3301")
	f.Add("GET /a/1/b/2\nGET /a/3/b/4\nGET /a/5/c")
	f.Fuzz(func(t *testing.T, in string) {
		rec := &Record{Header: Header{SessionID: "ses_fuzz"}}
		for _, line := range strings.Split(in, "\n") {
			m, p, ok := strings.Cut(line, " ")
			if !ok || m == "" {
				continue
			}
			rec.Requests = append(rec.Requests, Request{Method: strings.ToUpper(m), Host: "api.example.com:443", Path: p, Status: 200})
			if len(rec.Requests) > 64 {
				break
			}
		}
		res, err := Draft(rec, Options{FQN: "local://fuzz/learned"})
		if err != nil {
			return
		}
		for _, r := range rec.Requests {
			if unplaceable(r) != "" {
				continue
			}
			matched := false
			for _, op := range res.Spec.Tools[0].Operations {
				if op.Method == r.Method && templateMatches(splitPath(op.Path), splitPath(r.Path)) {
					matched = true
					break
				}
			}
			if !matched && !slices.ContainsFunc(res.Unplaced, func(u Unplaced) bool { return u.Method == r.Method && u.Path == MaskPath(r.Path) }) {
				t.Fatalf("%s %s is neither drafted nor unplaced; draft: %+v", r.Method, r.Path, res.Operations)
			}
		}
	})
}

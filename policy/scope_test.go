package policy

import (
	"errors"
	"reflect"
	"testing"
)

func TestLookupError(t *testing.T) {
	s := compileTest(t)
	sc := NewScope([]string{fqnGitHub, fqnGoogle, "github://gone/removed"})
	tests := []struct {
		name          string
		sc            Scope
		fqn, tool, op string
		want          LookupError
		sentinel      error
		msg           string
	}{
		{"not installed", sc, "github://nobody/none", "t", "o",
			LookupError{Kind: LookupConnector, FQN: "github://nobody/none", Tool: "t", Operation: "o", Allowed: []string{fqnGitHub, fqnGoogle}},
			ErrUnknownConnector,
			`looking up operation "o" of tool "t" in connector "github://nobody/none": unknown connector: it is not installed; this session's connectors are ` + fqnGitHub + ", " + fqnGoogle},
		{"installed, not in scope", sc, fqnDup, "gh2", "user",
			LookupError{Kind: LookupConnector, FQN: fqnDup, Tool: "gh2", Operation: "user", Installed: true, Allowed: []string{fqnGitHub, fqnGoogle}},
			ErrUnknownConnector,
			`looking up operation "user" of tool "gh2" in connector "` + fqnDup + `": unknown connector: it is not in this session; this session's connectors are ` + fqnGitHub + ", " + fqnGoogle},
		{"zero scope", Scope{}, fqnGitHub, "gh-api", "user.get",
			LookupError{Kind: LookupConnector, FQN: fqnGitHub, Tool: "gh-api", Operation: "user.get", Installed: true, Allowed: []string{}},
			ErrUnknownConnector,
			`looking up operation "user.get" of tool "gh-api" in connector "` + fqnGitHub + `": unknown connector: it is not in this session; this session has no connectors`},
		{"unknown tool", sc, fqnGitHub, "gh", "user.get",
			LookupError{Kind: LookupTool, FQN: fqnGitHub, Tool: "gh", Operation: "user.get", Installed: true, Allowed: []string{"gh-api"}},
			ErrUnknownTool,
			`looking up operation "user.get" of tool "gh" in connector "` + fqnGitHub + `": unknown tool "gh": the connector's tools are gh-api`},
		{"unknown operation", sc, fqnGoogle, "google", "nope",
			LookupError{Kind: LookupOperation, FQN: fqnGoogle, Tool: "google", Operation: "nope", Installed: true,
				Allowed: []string{"gmail.messages.search", "gmail.messages.send", "models.count", "models.lit", "models.method", "models.ops", "models.pro", "models.stream"}},
			ErrUnknownOperation,
			`looking up operation "nope" of tool "google" in connector "` + fqnGoogle + `": unknown operation "nope": tool google offers gmail.messages.search, gmail.messages.send, models.count, models.lit, models.method, models.ops, models.pro, models.stream`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Lookup(tc.sc, tc.fqn, tc.tool, tc.op)
			var le *LookupError
			if !errors.As(err, &le) {
				t.Fatalf("Lookup(%q, %q, %q) error = %v, want a *LookupError", tc.fqn, tc.tool, tc.op, err)
			}
			if !reflect.DeepEqual(*le, tc.want) {
				t.Errorf("Lookup(%q, %q, %q) = %+v, want %+v", tc.fqn, tc.tool, tc.op, *le, tc.want)
			}
			if !errors.Is(err, tc.sentinel) {
				t.Errorf("Lookup(%q, %q, %q) error does not wrap %v", tc.fqn, tc.tool, tc.op, tc.sentinel)
			}
			if err.Error() != tc.msg {
				t.Errorf("Lookup error =\n %s\nwant\n %s", err, tc.msg)
			}
		})
	}
	if n := (&LookupError{Kind: LookupTool, FQN: "f", Tool: "t", Operation: "o"}).Name(); n != "t" {
		t.Errorf("LookupError.Name() = %q, want the tool", n)
	}
	if LookupKind(0).String() != "unspecified" || LookupOperation.String() != "operation" {
		t.Errorf("LookupKind strings = %q, %q", LookupKind(0), LookupOperation)
	}
}

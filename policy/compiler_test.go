package policy

import (
	"strings"
	"testing"
)

func compilerSpec(fqn, version, path string) *Spec {
	return &Spec{SchemaVersion: SchemaVersion, Connector: ConnectorMeta{FQN: fqn, Version: version},
		Tools: []Tool{{Name: "t", Operations: []Operation{testOp("get", "GET", path, "api.example.com")}}}}
}

func lookupCompiled(t *testing.T, s *Snapshot, fqn string) *CompiledOperation {
	t.Helper()
	m, err := s.Lookup(NewScope([]string{fqn}), fqn, "t", "get")
	if err != nil {
		t.Fatalf("Lookup(%s t get): %v", fqn, err)
	}
	return m.Compiled
}

// TestCompilerReusesPackages checks that a Compiler builds a package once
// and shares it between snapshots, builds a new version afresh, and forgets
// what the last Compile did not use.
func TestCompilerReusesPackages(t *testing.T) {
	const a, b = "local://t/a", "local://t/b"
	var c Compiler
	v1 := Connector{Spec: compilerSpec(a, "1.0.0", "/v1/{id}"), Hash: "sha256:a1"}
	other := Connector{Spec: compilerSpec(b, "", "/other"), Hash: "sha256:b1"}

	s1, err := c.Compile([]Connector{v1})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := c.Compile([]Connector{other, v1})
	if err != nil {
		t.Fatal(err)
	}
	if s1 == s2 {
		t.Fatal("Compile returned the same snapshot twice; want a new snapshot sharing the package")
	}
	if p1, p2 := lookupCompiled(t, s1, a), lookupCompiled(t, s2, a); p1 != p2 {
		t.Fatalf("the unchanged package %s was rebuilt: compiled operations %p and %p differ", a, p1, p2)
	}
	if got := c.Builds(); got != 2 {
		t.Fatalf("Builds() = %d after building %s and %s once each, want 2", got, a, b)
	}
	// The shared package still matches in the new snapshot, next to the other.
	for _, r := range []Request{{"GET", "api.example.com", "/v1/42"}, {"GET", "api.example.com", "/other"}} {
		if d := s2.Decide(NewScope([]string{a, b}), r); !d.Allow {
			t.Fatalf("Decide(%q) = %v %s, want allow", r, d.Reason, d.Message)
		}
	}

	v2 := Connector{Spec: compilerSpec(a, "2.0.0", "/v2/{id}"), Hash: "sha256:a2"}
	s3, err := c.Compile([]Connector{other, v2})
	if err != nil {
		t.Fatal(err)
	}
	if p1, p3 := lookupCompiled(t, s1, a), lookupCompiled(t, s3, a); p1 == p3 || p3.Operation().Path != "/v2/{id}" {
		t.Fatalf("the new version of %s was not built afresh: %p (%s) after %p", a, p3, p3.Operation().Path, p1)
	}
	if got := c.Builds(); got != 3 {
		t.Fatalf("Builds() = %d after a new version, want 3", got)
	}
	// v1 was dropped by the last Compile: going back builds it again.
	if _, err := c.Compile([]Connector{v1}); err != nil {
		t.Fatal(err)
	}
	if got := c.Builds(); got != 4 {
		t.Fatalf("Builds() = %d after going back to a forgotten version, want 4", got)
	}
	if n := len(c.built); n != 1 {
		t.Fatalf("the Compiler holds %d packages after compiling one; want 1", n)
	}
}

// TestCompilerGuards checks what the Compiler never reuses: a connector
// without a hash, a hash seen with another FQN, and the state of a failed
// Compile.
func TestCompilerGuards(t *testing.T) {
	var c Compiler
	noHash := Connector{Spec: compilerSpec("local://t/a", "", "/a")}
	for range 2 {
		if _, err := c.Compile([]Connector{noHash}); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.Builds(); got != 2 {
		t.Fatalf("Builds() = %d after compiling a connector without hash twice, want 2", got)
	}
	x := Connector{Spec: compilerSpec("local://t/x", "", "/x"), Hash: "sha256:same"}
	y := Connector{Spec: compilerSpec("local://t/y", "", "/y"), Hash: "sha256:same"}
	if _, err := c.Compile([]Connector{x}); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile([]Connector{y})
	if err != nil {
		t.Fatal(err)
	}
	if d := s.Decide(NewScope([]string{"local://t/y"}), Request{"GET", "api.example.com", "/y"}); !d.Allow {
		t.Fatalf("a hash reused under another FQN served the cached connector: Decide = %v %s", d.Reason, d.Message)
	}
	builds := c.Builds()
	bad := Connector{Spec: compilerSpec("local://t/bad", "", "no-slash"), Hash: "sha256:bad"}
	if _, err := c.Compile([]Connector{y, bad}); err == nil || !strings.Contains(err.Error(), `compiling connector "local://t/bad"`) {
		t.Fatalf("Compile with an invalid path: err = %v, want it to name the connector", err)
	}
	if _, ok := c.built["sha256:same"]; !ok || c.Builds() != builds {
		t.Fatalf("a failed Compile changed the Compiler: holds y %v, builds %d (was %d)", ok, c.Builds(), builds)
	}
}

package policy

import (
	"reflect"
	"testing"
)

// compiledSpec has one operation with every kind of audit source, inputs,
// a custom-method template and repeated hosts, and one that is not
// proxyable.
func compiledSpec() *Spec {
	return &Spec{
		SchemaVersion: SchemaVersion,
		Connector:     ConnectorMeta{FQN: fqnGoogle},
		Tools: []Tool{{Name: "g", Operations: []Operation{
			{
				Name: "gen", Method: "POST", Path: "/v1/models/{model}:generate/a%20b/",
				Hosts: []string{hostGemini, hostGemini + ":443", "Alt.Example:8443"},
				Inputs: []Input{
					{Name: "model", Type: InputString, Required: true},
					{Name: "prompt", Type: InputString},
				},
				Audit: []AuditField{
					{Name: "model", Source: "path.model"},
					{Name: "page", Source: "query.page[size]"},
					{Name: "prompt", Source: "args.prompt", Redact: true},
					{Name: "odd", Source: "header.x"},
				},
			},
			{Name: "help", Audit: []AuditField{{Name: "a", Source: "args.a"}}},
		}}},
	}
}

func TestCompiledOperation(t *testing.T) {
	s, err := Compile([]Connector{{Spec: compiledSpec()}})
	if err != nil {
		t.Fatal(err)
	}
	sc := NewScope([]string{fqnGoogle})
	m, err := s.Lookup(sc, fqnGoogle, "g", "gen")
	if err != nil {
		t.Fatal(err)
	}
	c := m.Compiled
	conn, _ := s.Connector(fqnGoogle)
	if op := &conn.Spec.Tools[0].Operations[0]; c == nil || c.Operation() != op {
		t.Fatalf("Lookup(gen).Compiled = %+v, want the compiled form of %+v", c, op)
	}
	d := s.Decide(sc, Request{Method: "POST", Host: hostGemini, Path: "/v1/models/pro:generate/a%20b/"})
	if !d.Allow || d.Match.Compiled != c {
		t.Errorf("Decide(gen).Match.Compiled = %p, want the Lookup one %p", d.Match.Compiled, c)
	}

	if got, want := c.Hosts(), []string{hostGemini + ":443", "alt.example:8443"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Hosts() = %q, want %q", got, want)
	}
	tmpl := c.Template()
	if tmpl.String() != "/v1/models/{model}:generate/a%20b/" || !reflect.DeepEqual(tmpl.Params(), []string{"model"}) ||
		!tmpl.HasParam("model") || tmpl.HasParam("prompt") {
		t.Errorf("Template() = %q with params %q", tmpl, tmpl.Params())
	}
	type seg struct {
		raw, param, suffix string
		isParam            bool
	}
	var segs []seg
	for _, sg := range tmpl.Segments() {
		segs = append(segs, seg{sg.Raw(), sg.Param(), sg.Suffix(), sg.IsParam()})
	}
	wantSegs := []seg{{"v1", "", "", false}, {"models", "", "", false}, {"{model}:generate", "model", ":generate", true}, {"a%20b", "", "", false}, {"", "", "", false}}
	if !reflect.DeepEqual(segs, wantSegs) {
		t.Errorf("Segments() = %+v, want %+v", segs, wantSegs)
	}

	type src struct {
		field  string
		kind   AuditSourceKind
		name   string
		redact bool
	}
	var srcs []src
	for _, a := range c.AuditSources() {
		srcs = append(srcs, src{a.Field(), a.Kind(), a.Name(), a.IsRedacted()})
	}
	wantSrcs := []src{
		{"model", AuditFromPath, "model", false},
		{"page", AuditFromQuery, "page[size]", false},
		{"prompt", AuditFromArgs, "prompt", true},
		{"odd", AuditSourceUnknown, "x", false},
	}
	if !reflect.DeepEqual(srcs, wantSrcs) {
		t.Errorf("AuditSources() = %+v, want %+v", srcs, wantSrcs)
	}

	if got, want := c.Inputs().Names(), []string{"model", "prompt"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Inputs().Names() = %q, want %q", got, want)
	}
	if in, ok := c.Inputs().Input("model"); !ok || !in.Required {
		t.Errorf("Inputs().Input(model) = %+v, %v; want the required input", in, ok)
	}
	if _, ok := c.Inputs().Input("nope"); ok {
		t.Error("Inputs().Input(nope) found an input")
	}

	help, err := s.Lookup(sc, fqnGoogle, "g", "help")
	if err != nil {
		t.Fatal(err)
	}
	if hc := help.Compiled; hc.Template() != nil || hc.Hosts() != nil || len(hc.AuditSources()) != 1 || hc.AuditSources()[0].Kind() != AuditFromArgs {
		t.Errorf("Lookup(help).Compiled = %+v, want no template or hosts and one args source", hc)
	}
}

// TestCompiledUndeclaredTemplate: a template that is not a declared input
// (ParseSpec refuses it, Compile does not) is still an argument name.
func TestCompiledUndeclaredTemplate(t *testing.T) {
	spec := &Spec{SchemaVersion: SchemaVersion, Connector: ConnectorMeta{FQN: fqnGitHub}, Tools: []Tool{{Name: "t", Operations: []Operation{
		{Name: "o", Method: "GET", Path: "/r/{owner}/{repo}", Hosts: []string{"h.example"}, Inputs: []Input{{Name: "q"}, {Name: "repo"}}},
	}}}}
	s, err := Compile([]Connector{{Spec: spec}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.Lookup(NewScope([]string{fqnGitHub}), fqnGitHub, "t", "o")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.Compiled.Inputs().Names(), []string{"q", "repo", "owner"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Inputs().Names() = %q, want %q", got, want)
	}
}

func TestParseAuditSource(t *testing.T) {
	tests := []struct {
		in   string
		kind AuditSourceKind
		name string
	}{
		{"args.q", AuditFromArgs, "q"},
		{"path.owner", AuditFromPath, "owner"},
		{"query.page[size]", AuditFromQuery, "page[size]"},
		{"query.a.b", AuditFromQuery, "a.b"},
		{"args", AuditFromArgs, ""},
		{"header.x", AuditSourceUnknown, "x"},
		{"", AuditSourceUnknown, ""},
		{"ARGS.q", AuditSourceUnknown, "q"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			if kind, name := ParseAuditSource(tc.in); kind != tc.kind || name != tc.name {
				t.Errorf("ParseAuditSource(%q) = %v, %q; want %v, %q", tc.in, kind, name, tc.kind, tc.name)
			}
		})
	}
	if AuditSourceKind(0).String() != "unknown" || AuditFromQuery.String() != "query" {
		t.Errorf("AuditSourceKind strings = %q, %q", AuditSourceKind(0), AuditFromQuery)
	}
}

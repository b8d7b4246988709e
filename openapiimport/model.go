package openapiimport

import (
	"fmt"
	"sort"
	"strings"

	"github.com/pb33f/go-yaml"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	v2 "github.com/pb33f/libopenapi/datamodel/high/v2"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
	"github.com/pb33f/libopenapi/orderedmap"

	"github.com/aileron-dev/aileron-proxy/policy"
)

// The neutral model: what the mapping needs from a 2.0 or 3.x document.

// docModel is a description reduced to what an import maps.
type docModel struct {
	servers  []docServer
	security []requirement
	schemes  map[string]scheme
	ext      map[string]string
	ops      []docOp
	version  string // info.version
}

// docServer is a server URL with its variables.
type docServer struct {
	url  string
	vars map[string]serverVar
}

type serverVar struct {
	def  string
	enum []string
}

// requirement is one security requirement: scheme names that apply together
// (empty: no credential needed).
type requirement []string

// scheme is a security scheme of the document.
type scheme struct {
	typ        string // http, apiKey, oauth2, openIdConnect, basic (2.0)
	httpScheme string // bearer, basic (http type)
	in, name   string // apiKey placement
	desc       string
	tokenURL   string
	oidcURL    string
}

// docParam is a parameter or a top-level body property.
type docParam struct {
	name     string
	in       string // path, query, header, cookie, body, formData
	required bool
	typ      policy.InputType
	desc     string
}

// docOp is one operation of the document.
type docOp struct {
	method  string // upper case
	path    string // as the document writes it
	pointer string // JSON pointer of the operation
	id      string
	summary string
	desc    string
	tags    []string
	params  []docParam
	// bodyMedia lists the request body's media types; bodyJSON is set when
	// one is JSON and then bodyProps holds its top-level properties.
	bodyMedia []string
	bodyJSON  bool
	bodyProps []docParam
	// security is the operation's own requirements when securitySet.
	security    []requirement
	securitySet bool
	// servers overrides the document's when non-nil (3.x).
	servers []docServer
	ext     map[string]string
}

// extensions reads the x-aileron-* extensions of m as strings.
func extensions(m *orderedmap.Map[string, *yaml.Node]) map[string]string {
	out := map[string]string{}
	if m == nil {
		return out
	}
	for p := m.First(); p != nil; p = p.Next() {
		if strings.HasPrefix(p.Key(), "x-aileron-") && p.Value() != nil {
			out[p.Key()] = p.Value().Value
		}
	}
	return out
}

func requirements(rs []*base.SecurityRequirement) []requirement {
	out := []requirement{}
	for _, r := range rs {
		var names requirement
		if r != nil && r.Requirements != nil {
			for p := r.Requirements.First(); p != nil; p = p.Next() {
				names = append(names, p.Key())
			}
		}
		out = append(out, names)
	}
	return out
}

// schemaInfo maps a schema onto an input type and returns its description.
func schemaType(sp *base.SchemaProxy) (policy.InputType, string) {
	if sp == nil {
		return "", ""
	}
	s := sp.Schema()
	if s == nil {
		return "", ""
	}
	return typeOf(s, newSchemaWalk()), s.Description
}

// maxSchemaVisits bounds the schemas one walk (a body's properties, one
// input's type) looks at. Together with the visited set it keeps a walk
// linear in the document: a schema whose allOf/oneOf/anyOf names itself
// several times would otherwise be walked exponentially often.
const maxSchemaVisits = 1024

// schemaWalk remembers the schemas a walk has entered (by the document node
// they come from, so a circular $ref is entered once) and counts visits.
type schemaWalk struct {
	seen   map[any]bool
	visits int
}

func newSchemaWalk() *schemaWalk { return &schemaWalk{seen: map[any]bool{}} }

// enter reports whether s is new to the walk and the budget allows it.
func (w *schemaWalk) enter(s *base.Schema) bool {
	if w.visits >= maxSchemaVisits {
		return false
	}
	var key any = s
	if low := s.GoLow(); low != nil && low.RootNode != nil {
		key = low.RootNode
	}
	if w.seen[key] {
		return false
	}
	w.seen[key] = true
	w.visits++
	return true
}

func typeOf(s *base.Schema, w *schemaWalk) policy.InputType {
	for _, t := range s.Type {
		switch t {
		case "string", "integer", "number", "boolean", "array", "object":
			return policy.InputType(t)
		}
	}
	if !w.enter(s) {
		return ""
	}
	if s.Properties != nil && s.Properties.Len() > 0 {
		return policy.InputObject
	}
	if s.Items != nil {
		return policy.InputArray
	}
	for _, alts := range [][]*base.SchemaProxy{s.AllOf, s.OneOf, s.AnyOf} {
		for _, a := range alts {
			if a == nil {
				continue
			}
			if as := a.Schema(); as != nil {
				if t := typeOf(as, w); t != "" {
					return t
				}
			}
		}
	}
	return ""
}

// properties returns the top-level properties of a JSON body schema, after
// merging allOf, with their required flags. Each schema is entered once
// (allOf cycles end there).
func properties(sp *base.SchemaProxy) []docParam {
	var out []docParam
	seen := map[string]int{}
	w := newSchemaWalk()
	var walk func(sp *base.SchemaProxy)
	walk = func(sp *base.SchemaProxy) {
		if sp == nil {
			return
		}
		s := sp.Schema()
		if s == nil || !w.enter(s) {
			return
		}
		for _, a := range s.AllOf {
			walk(a)
		}
		if s.Properties != nil {
			for p := s.Properties.First(); p != nil; p = p.Next() {
				typ, desc := schemaType(p.Value())
				if i, dup := seen[p.Key()]; dup {
					if out[i].typ == "" {
						out[i].typ = typ
					}
					continue
				}
				seen[p.Key()] = len(out)
				out = append(out, docParam{name: p.Key(), in: "body", typ: typ, desc: desc})
			}
		}
		for _, r := range s.Required {
			if i, ok := seen[r]; ok {
				out[i].required = true
			}
		}
	}
	walk(sp)
	return out
}

// isJSONMedia reports whether a media type is JSON (application/json or a
// +json suffix, parameters ignored).
func isJSONMedia(m string) bool {
	m, _, _ = strings.Cut(strings.ToLower(strings.TrimSpace(m)), ";")
	m = strings.TrimSpace(m)
	return m == "application/json" || strings.HasSuffix(m, "+json") || m == "*/*" && false
}

// fromV3 reduces a 3.x model.
func fromV3(m *v3.Document) *docModel {
	d := &docModel{schemes: map[string]scheme{}, ext: extensions(m.Extensions)}
	if m.Info != nil {
		d.version = m.Info.Version
	}
	d.servers = v3Servers(m.Servers)
	d.security = requirements(m.Security)
	if m.Components != nil && m.Components.SecuritySchemes != nil {
		for p := m.Components.SecuritySchemes.First(); p != nil; p = p.Next() {
			s := p.Value()
			if s == nil {
				continue
			}
			sc := scheme{typ: s.Type, httpScheme: strings.ToLower(s.Scheme), in: s.In, name: s.Name, desc: s.Description, oidcURL: s.OpenIdConnectUrl}
			if f := s.Flows; f != nil {
				for _, fl := range []*v3.OAuthFlow{f.AuthorizationCode, f.ClientCredentials, f.Password} {
					if fl != nil && fl.TokenUrl != "" {
						sc.tokenURL = fl.TokenUrl
						break
					}
				}
			}
			d.schemes[p.Key()] = sc
		}
	}
	if m.Paths == nil || m.Paths.PathItems == nil {
		return d
	}
	for pp := m.Paths.PathItems.First(); pp != nil; pp = pp.Next() {
		path, item := pp.Key(), pp.Value()
		if item == nil {
			continue
		}
		pathExt := extensions(item.Extensions)
		var pathServers []docServer
		if len(item.Servers) > 0 {
			pathServers = v3Servers(item.Servers)
		}
		ops := item.GetOperations()
		if ops == nil {
			continue
		}
		for op := ops.First(); op != nil; op = op.Next() {
			o := op.Value()
			if o == nil {
				continue
			}
			dop := docOp{
				method:  strings.ToUpper(op.Key()),
				path:    path,
				pointer: "/paths/" + escapePointer(path) + "/" + strings.ToLower(op.Key()),
				id:      o.OperationId,
				summary: o.Summary,
				desc:    o.Description,
				tags:    o.Tags,
				servers: pathServers,
				ext:     mergeExt(pathExt, extensions(o.Extensions)),
			}
			if len(o.Servers) > 0 {
				dop.servers = v3Servers(o.Servers)
			}
			dop.params = mergeParams(v3Params(item.Parameters), v3Params(o.Parameters))
			if low := o.GoLow(); low != nil && low.Security.KeyNode != nil {
				dop.securitySet = true
				dop.security = requirements(o.Security)
			}
			if rb := o.RequestBody; rb != nil && rb.Content != nil {
				var jsonSchema *base.SchemaProxy
				for c := rb.Content.First(); c != nil; c = c.Next() {
					dop.bodyMedia = append(dop.bodyMedia, c.Key())
					if isJSONMedia(c.Key()) && !dop.bodyJSON {
						dop.bodyJSON = true
						if c.Value() != nil {
							jsonSchema = c.Value().Schema
						}
					}
				}
				if dop.bodyJSON {
					dop.bodyProps = properties(jsonSchema)
				}
			}
			d.ops = append(d.ops, dop)
		}
	}
	return d
}

func v3Servers(ss []*v3.Server) []docServer {
	out := []docServer{}
	for _, s := range ss {
		if s == nil {
			continue
		}
		ds := docServer{url: s.URL, vars: map[string]serverVar{}}
		if s.Variables != nil {
			for p := s.Variables.First(); p != nil; p = p.Next() {
				if v := p.Value(); v != nil {
					ds.vars[p.Key()] = serverVar{def: v.Default, enum: v.Enum}
				}
			}
		}
		out = append(out, ds)
	}
	return out
}

func v3Params(ps []*v3.Parameter) []docParam {
	var out []docParam
	for _, p := range ps {
		if p == nil {
			continue
		}
		typ, sdesc := schemaType(p.Schema)
		if p.Schema == nil && p.Content != nil {
			if c := p.Content.First(); c != nil && c.Value() != nil {
				typ, sdesc = schemaType(c.Value().Schema)
			}
		}
		desc := p.Description
		if desc == "" {
			desc = sdesc
		}
		out = append(out, docParam{name: p.Name, in: p.In, required: p.Required != nil && *p.Required, typ: typ, desc: desc})
	}
	return out
}

// mergeParams merges path-level parameters with the operation's; the
// operation's win (same name and location).
func mergeParams(pathLevel, opLevel []docParam) []docParam {
	out := append([]docParam(nil), opLevel...)
	for _, p := range pathLevel {
		overridden := false
		for _, o := range opLevel {
			if o.name == p.name && o.in == p.in {
				overridden = true
				break
			}
		}
		if !overridden {
			out = append(out, p)
		}
	}
	return out
}

func mergeExt(outer, inner map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range outer {
		out[k] = v
	}
	for k, v := range inner {
		out[k] = v
	}
	return out
}

// fromV2 reduces a Swagger 2.0 model: host, basePath and schemes become
// server URLs; body and formData parameters become the request body.
func fromV2(m *v2.Swagger) *docModel {
	d := &docModel{schemes: map[string]scheme{}, ext: extensions(m.Extensions)}
	if m.Info != nil {
		d.version = m.Info.Version
	}
	schemes := m.Schemes
	if len(schemes) == 0 {
		schemes = []string{"https"}
	}
	base := m.BasePath
	if base == "/" {
		base = ""
	}
	for _, s := range schemes {
		if m.Host == "" {
			d.servers = append(d.servers, docServer{url: base})
			break
		}
		d.servers = append(d.servers, docServer{url: s + "://" + m.Host + base})
	}
	d.security = requirements(m.Security)
	if m.SecurityDefinitions != nil && m.SecurityDefinitions.Definitions != nil {
		for p := m.SecurityDefinitions.Definitions.First(); p != nil; p = p.Next() {
			s := p.Value()
			if s == nil {
				continue
			}
			sc := scheme{typ: s.Type, in: s.In, name: s.Name, desc: s.Description, tokenURL: s.TokenUrl}
			if s.Type == "basic" {
				sc.typ, sc.httpScheme = "http", "basic"
			}
			d.schemes[p.Key()] = sc
		}
	}
	if m.Paths == nil || m.Paths.PathItems == nil {
		return d
	}
	for pp := m.Paths.PathItems.First(); pp != nil; pp = pp.Next() {
		path, item := pp.Key(), pp.Value()
		if item == nil {
			continue
		}
		pathExt := extensions(item.Extensions)
		ops := item.GetOperations()
		if ops == nil {
			continue
		}
		for op := ops.First(); op != nil; op = op.Next() {
			o := op.Value()
			if o == nil {
				continue
			}
			dop := docOp{
				method:  strings.ToUpper(op.Key()),
				path:    path,
				pointer: "/paths/" + escapePointer(path) + "/" + strings.ToLower(op.Key()),
				id:      o.OperationId,
				summary: o.Summary,
				desc:    o.Description,
				tags:    o.Tags,
				ext:     mergeExt(pathExt, extensions(o.Extensions)),
			}
			consumes := o.Consumes
			if len(consumes) == 0 {
				consumes = m.Consumes
			}
			all := mergeParams(v2Params(item.Parameters), v2Params(o.Parameters))
			var form []string
			for _, p := range all {
				switch p.in {
				case "body":
					dop.bodyMedia = consumes
					if len(consumes) == 0 {
						dop.bodyMedia = []string{"application/json"}
					}
					for _, c := range dop.bodyMedia {
						if isJSONMedia(c) {
							dop.bodyJSON = true
						}
					}
				case "formData":
					form = append(form, p.name)
				default:
					dop.params = append(dop.params, p)
				}
			}
			if dop.bodyJSON {
				for _, p := range o.Parameters {
					if p != nil && p.In == "body" {
						dop.bodyProps = properties(p.Schema)
					}
				}
			}
			if len(form) > 0 {
				dop.bodyMedia = consumes
				if len(dop.bodyMedia) == 0 {
					dop.bodyMedia = []string{"application/x-www-form-urlencoded"}
				}
				dop.bodyJSON = false
				sort.Strings(form)
				dop.ext["\x00form"] = strings.Join(form, ", ")
			}
			if low := o.GoLow(); low != nil && low.Security.KeyNode != nil {
				dop.securitySet = true
				dop.security = requirements(o.Security)
			}
			d.ops = append(d.ops, dop)
		}
	}
	return d
}

func v2Params(ps []*v2.Parameter) []docParam {
	var out []docParam
	for _, p := range ps {
		if p == nil {
			continue
		}
		typ := policy.InputType("")
		switch p.Type {
		case "string", "integer", "number", "boolean", "array", "object":
			typ = policy.InputType(p.Type)
		case "file":
			typ = policy.InputString
		}
		out = append(out, docParam{name: p.Name, in: p.In, required: p.Required != nil && *p.Required, typ: typ, desc: p.Description})
	}
	return out
}

// model builds the neutral model of a loaded description.
func (l *loaded) model(name string) (*docModel, error) {
	if l.version == 2 {
		m, err := l.doc.BuildV2Model()
		if err := buildError(name, err); err != nil || m == nil {
			return nil, orNoModel(name, err)
		}
		return fromV2(&m.Model), nil
	}
	m, err := l.doc.BuildV3Model()
	if err := buildError(name, err); err != nil || m == nil {
		return nil, orNoModel(name, err)
	}
	return fromV3(&m.Model), nil
}

func orNoModel(name string, err error) error {
	if err != nil {
		return err
	}
	return &LocationError{File: name, Msg: "the description could not be read as an OpenAPI model"}
}

// buildError turns libopenapi's model errors (which carry "line L, col C")
// into a LocationError naming the first problem.
// Circular references are not errors for an import: only the top-level
// properties of a body are read.
func buildError(name string, err error) error {
	if err == nil {
		return nil
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		if line == "" || strings.Contains(line, "circular reference") {
			continue
		}
		return &LocationError{File: name, Line: lineOf(line), Msg: fmt.Sprintf("the description does not resolve: %s", line)}
	}
	return nil
}

// lineOf extracts "line N" from a libopenapi message, or 0.
func lineOf(msg string) int { return yamlErrLine(errString(msg)) }

type errString string

func (e errString) Error() string { return string(e) }

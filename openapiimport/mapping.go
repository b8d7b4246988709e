package openapiimport

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/aileron-dev/aileron-proxy/policy"
)

// filter selects operations: --include, --tag and --operation-id add
// (any one selects), --exclude removes; with no selector every operation is
// selected.
type filter struct {
	include, exclude []methodGlob
	tags             []string
	ids              []string
}

type methodGlob struct {
	method string // upper case or "*"
	glob   string
}

func newFilter(opts Options) (*filter, error) {
	f := &filter{tags: opts.Tags, ids: opts.OperationIDs}
	for _, g := range opts.OperationIDs {
		if _, err := path.Match(g, ""); err != nil {
			return nil, fmt.Errorf("--operation-id %q is not a valid glob: %w", g, err)
		}
	}
	parse := func(flag string, rules []string) ([]methodGlob, error) {
		var out []methodGlob
		for _, r := range rules {
			m, g, ok := strings.Cut(strings.TrimSpace(r), " ")
			g = strings.TrimSpace(g)
			if !ok || m == "" || !strings.HasPrefix(g, "/") {
				return nil, fmt.Errorf("%s %q must be 'METHOD PATHGLOB', e.g. 'GET /repos/**' or '* /user'", flag, r)
			}
			m = strings.ToUpper(m)
			if m != "*" && methodRank(m) == 99 {
				return nil, fmt.Errorf("%s %q: %q is not an HTTP method; use GET, HEAD, POST, PUT, PATCH, DELETE or *", flag, r, m)
			}
			out = append(out, methodGlob{m, g})
		}
		return out, nil
	}
	var err error
	if f.include, err = parse("--include", opts.Include); err != nil {
		return nil, err
	}
	if f.exclude, err = parse("--exclude", opts.Exclude); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *filter) selects(o docOp) bool {
	sel := len(f.include) == 0 && len(f.tags) == 0 && len(f.ids) == 0
	for _, g := range f.include {
		if g.matches(o) {
			sel = true
		}
	}
	for _, t := range f.tags {
		if slices.Contains(o.tags, t) {
			sel = true
		}
	}
	for _, g := range f.ids {
		if ok, _ := path.Match(g, o.id); ok && o.id != "" {
			sel = true
		}
	}
	for _, g := range f.exclude {
		if g.matches(o) {
			return false
		}
	}
	return sel
}

func (g methodGlob) matches(o docOp) bool {
	return (g.method == "*" || g.method == o.method) && MatchPathGlob(g.glob, o.path)
}

// MatchPathGlob reports whether the document path p matches glob: "*"
// matches any text within one segment, "**" any text across segments.
func MatchPathGlob(glob, p string) bool {
	for len(glob) > 0 {
		switch {
		case strings.HasPrefix(glob, "**"):
			rest := glob[2:]
			for i := len(p); i >= 0; i-- {
				if MatchPathGlob(rest, p[i:]) {
					return true
				}
			}
			return false
		case glob[0] == '*':
			rest := glob[1:]
			for i := 0; i <= len(p); i++ {
				if MatchPathGlob(rest, p[i:]) {
					return true
				}
				if i < len(p) && p[i] == '/' {
					break
				}
			}
			return false
		default:
			if len(p) == 0 || p[0] != glob[0] {
				return false
			}
			glob, p = glob[1:], p[1:]
		}
	}
	return p == ""
}

// hostSet is what servers resolve to: hosts and the path prefix.
type hostSet struct {
	hosts  []string
	prefix string
}

var templateVar = regexp.MustCompile(`\{([^{}]*)\}`)

func serversKey(ss []docServer) string {
	var b strings.Builder
	for _, s := range ss {
		b.WriteString(s.url)
		b.WriteByte('\n')
	}
	return b.String()
}

// resolveHosts turns server URLs into hosts and a path prefix (see
// docs/import.md, "Hosts").
func resolveHosts(servers []docServer, opts Options, r *Result, where string) (hostSet, error) {
	var hs hostSet
	prefixSet := false
	var unusable []string
	for _, s := range servers {
		missing := ""
		u := templateVar.ReplaceAllStringFunc(s.url, func(m string) string {
			name := m[1 : len(m)-1]
			if v, ok := opts.ServerVars[name]; ok {
				return v
			}
			if v, ok := s.vars[name]; ok && v.def != "" {
				return v.def
			}
			missing = name
			return m
		})
		scheme, rest, abs := strings.Cut(u, "://")
		hostPart, prefix := rest, ""
		if !abs {
			hostPart, prefix = "", u
		} else if i := strings.IndexByte(rest, '/'); i >= 0 {
			hostPart, prefix = rest[:i], rest[i:]
		}
		if prefix != "" && !strings.HasPrefix(prefix, "/") {
			prefix = "/" + prefix
		}
		prefix = strings.TrimRight(prefix, "/")
		if !prefixSet {
			hs.prefix, prefixSet = prefix, true
		} else if prefix != hs.prefix {
			r.Notes = append(r.Notes, Note{where, fmt.Sprintf("server %q has the path prefix %q, not %q like the first server; it is left out", s.url, prefix, hs.prefix)})
			continue
		}
		switch {
		case missing != "":
			unusable = append(unusable, fmt.Sprintf("%q (variable {%s} has no default; set it with --server-var %s=VALUE)", s.url, missing, missing))
		case !abs:
			unusable = append(unusable, fmt.Sprintf("%q (no host)", s.url))
		case strings.ToLower(scheme) != "https":
			r.Notes = append(r.Notes, Note{where, fmt.Sprintf("server %q is not https; it is left out (the proxy reaches upstreams over TLS only)", s.url)})
			unusable = append(unusable, fmt.Sprintf("%q (not https)", s.url))
		case isPlaceholderHost(hostPart):
			unusable = append(unusable, fmt.Sprintf("%q (a placeholder host)", s.url))
		default:
			if _, _, err := policy.ParseHostPort(hostPart); err != nil {
				unusable = append(unusable, fmt.Sprintf("%q (%s)", s.url, err))
				continue
			}
			h := strings.ToLower(hostPart)
			if !slices.Contains(hs.hosts, h) {
				hs.hosts = append(hs.hosts, h)
			}
		}
	}
	if len(opts.Hosts) > 0 {
		hs.hosts = nil
		for _, h := range opts.Hosts {
			if _, _, err := policy.ParseHostPort(h); err != nil {
				return hostSet{}, fmt.Errorf("--host %q: %w", h, err)
			}
			hs.hosts = append(hs.hosts, strings.ToLower(h))
		}
		return hs, nil
	}
	if len(hs.hosts) == 0 {
		if len(servers) == 0 {
			return hostSet{}, fmt.Errorf("the description names no server (no servers, or no host in Swagger 2.0); pass --host HOST[:PORT]")
		}
		return hostSet{}, fmt.Errorf("the description names no usable https host: %s; pass --host HOST[:PORT]", strings.Join(unusable, ", "))
	}
	return hs, nil
}

// isPlaceholderHost reports whether h is a stand-in a reader must replace:
// a label starting with "your", example.com/.net/.org or localhost.
func isPlaceholderHost(h string) bool {
	h = strings.ToLower(h)
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h, "]") {
		h = h[:i]
	}
	for _, label := range strings.Split(h, ".") {
		if strings.HasPrefix(label, "your") {
			return true
		}
	}
	for _, p := range []string{"example.com", "example.net", "example.org", "localhost"} {
		if h == p || strings.HasSuffix(h, "."+p) {
			return true
		}
	}
	return false
}

// mapOperation maps one document operation; it returns the operation
// (without its name) and the security scheme it uses ("" for none or an
// override).
func mapOperation(o docOp, d *docModel, opts Options, approval map[string]bool, hosts hostSet, r *Result) (policy.Operation, string) {
	where := o.method + " " + o.path
	op := policy.Operation{
		Method:  o.method,
		Hosts:   slices.Clone(hosts.hosts),
		Summary: oneLine(o.summary, 160),
	}
	if op.Summary == "" {
		op.Summary = oneLine(firstSentence(o.desc), 160)
	} else if o.desc != "" {
		op.Description = oneLine(firstParagraph(o.desc), 300)
	}

	// Templates keep the document's names unless a name falls outside the
	// spec's characters; then it is renamed in the path and the inputs.
	rename := map[string]string{}
	p := templateVar.ReplaceAllStringFunc(o.path, func(m string) string {
		name := m[1 : len(m)-1]
		if name == "" || policy.IsValidName(name) {
			return m
		}
		nn := sanitizeName(name)
		rename[name] = nn
		r.Notes = append(r.Notes, Note{where, fmt.Sprintf("template {%s} is renamed {%s} (names use letters, digits, '.', '_', ':' and '-')", name, nn)})
		return "{" + nn + "}"
	})
	op.Path = hosts.prefix + p
	if op.Path == "" {
		op.Path = "/"
	}

	seen := map[string]bool{}
	add := func(in policy.Input, kind string) {
		if !policy.IsValidName(in.Name) {
			r.Notes = append(r.Notes, Note{where, fmt.Sprintf("%s %q cannot be an input name (letters, digits, '.', '_', ':' and '-' only); it is not declared", kind, in.Name)})
			return
		}
		if seen[in.Name] {
			r.Notes = append(r.Notes, Note{where, fmt.Sprintf("%s %q has the name of an input already declared; only the first is", kind, in.Name)})
			return
		}
		seen[in.Name] = true
		op.Inputs = append(op.Inputs, in)
	}
	// Path parameters in template order, then query parameters in document
	// order, then the JSON body's top-level properties.
	for _, m := range templateVar.FindAllStringSubmatch(o.path, -1) {
		name := m[1]
		in := policy.Input{Name: name, Type: policy.InputString, Required: true}
		for _, prm := range o.params {
			if prm.in == "path" && prm.name == name {
				in.Type, in.Description = orString(prm.typ), oneLine(firstSentence(prm.desc), 160)
			}
		}
		if nn, ok := rename[name]; ok {
			in.Name = nn
		}
		add(in, "path parameter")
	}
	for _, prm := range o.params {
		switch prm.in {
		case "query":
			add(policy.Input{Name: prm.name, Type: orString(prm.typ), Required: prm.required, Description: oneLine(firstSentence(prm.desc), 160)}, "query parameter")
		case "header", "cookie":
			r.Notes = append(r.Notes, Note{where, fmt.Sprintf("%s parameter %q cannot be declared as an input; the proxy passes it through as sent", prm.in, prm.name)})
		}
	}
	if len(o.bodyMedia) > 0 && !o.bodyJSON {
		msg := fmt.Sprintf("request body (%s) is not JSON, so its fields cannot be declared as inputs; the proxy passes the body through as sent", strings.Join(o.bodyMedia, ", "))
		if form := o.ext["\x00form"]; form != "" {
			msg += " (form fields: " + form + ")"
		}
		r.Notes = append(r.Notes, Note{where, msg})
	}
	for _, prm := range o.bodyProps {
		add(policy.Input{Name: prm.name, Type: orString(prm.typ), Required: prm.required, Description: oneLine(firstSentence(prm.desc), 160)}, "body property")
	}

	switch o.method {
	case "GET", "HEAD", "PUT", "DELETE":
		op.Idempotency = policy.Idempotent
	default:
		op.Idempotency = policy.NotIdempotent
	}
	switch v := o.ext["x-aileron-idempotency"]; v {
	case "idempotent", "not_idempotent":
		op.Idempotency = policy.Idempotency(v)
	case "":
	default:
		r.Notes = append(r.Notes, Note{where, fmt.Sprintf("x-aileron-idempotency %q is not idempotent or not_idempotent; ignored", v)})
	}
	if approval[o.method] || o.ext["x-aileron-approval"] == "required" {
		op.Approval = policy.ApprovalRequired
	}

	if opts.Credential != "" {
		op.Credential = opts.Credential
		return op, ""
	}
	ext := o.ext["x-aileron-credential"]
	if ext == "" {
		ext = d.ext["x-aileron-credential"]
	}
	if ext != "" {
		op.Credential = policy.CredentialKind(ext)
		return op, ""
	}
	reqs := d.security
	if o.securitySet {
		reqs = o.security
	}
	for _, req := range reqs {
		for _, name := range req {
			sc, ok := d.schemes[name]
			if !ok {
				r.Notes = append(r.Notes, Note{where, fmt.Sprintf("security scheme %q is not defined; it is ignored", name)})
				continue
			}
			kind := schemeKind(sc)
			if kind == "" {
				r.Notes = append(r.Notes, Note{where, fmt.Sprintf("security scheme %q (%s %s) has no credential kind; the operation gets none", name, sc.typ, sc.httpScheme)})
				continue
			}
			op.Credential = kind
			return op, name
		}
	}
	return op, ""
}

// schemeKind maps a security scheme onto a credential kind, "" when none
// fits.
func schemeKind(sc scheme) policy.CredentialKind {
	switch sc.typ {
	case "http":
		switch sc.httpScheme {
		case "bearer":
			return policy.CredentialBearer
		case "basic":
			return policy.CredentialBasic
		}
	case "apiKey":
		return policy.CredentialAPIKey
	case "oauth2", "openIdConnect":
		return policy.CredentialOAuth2
	}
	return ""
}

func orString(t policy.InputType) policy.InputType {
	if t == "" {
		return policy.InputString
	}
	return t
}

// nameOperations gives each operation its name: the operationId in the
// spec's characters, else method and path; repeats get "-2", "-3", ...
func nameOperations(ops []policy.Operation, origin []docOp, r *Result) {
	used := map[string]bool{}
	for i := range ops {
		base := operationName(origin[i])
		name := base
		for n := 2; used[name]; n++ {
			suffix := fmt.Sprintf("-%d", n)
			name = truncate(base, 128-len(suffix)) + suffix
		}
		if name != base {
			r.Notes = append(r.Notes, Note{origin[i].method + " " + origin[i].path, fmt.Sprintf("operation name %q is taken; this one is %q", base, name)})
		}
		used[name] = true
		ops[i].Name = name
	}
}

// operationName maps an operationId onto the spec's name characters ('/'
// becomes '.', anything else outside them '_'), or derives a name from the
// method and path.
func operationName(o docOp) string {
	if o.id != "" {
		if n := sanitizeName(strings.ReplaceAll(o.id, "/", ".")); n != "" {
			return truncate(n, 128)
		}
	}
	parts := []string{strings.ToLower(o.method)}
	for _, seg := range strings.Split(o.path, "/") {
		seg = strings.NewReplacer("{", "", "}", "").Replace(seg)
		if seg != "" {
			parts = append(parts, sanitizeName(seg))
		}
	}
	return truncate(strings.Join(parts, "."), 128)
}

// sanitizeName replaces every character outside [A-Za-z0-9._:-] with '_'
// (runs collapse) and trims '_' at the ends.
func sanitizeName(s string) string {
	var b strings.Builder
	dash := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-' {
			b.WriteByte(c)
			dash = false
			continue
		}
		if !dash {
			b.WriteByte('_')
			dash = true
		}
	}
	return strings.Trim(b.String(), "_")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// oneLine collapses whitespace and cuts s to n bytes at a rune boundary,
// adding "…" when cut.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strings.TrimRight(s[:cut], " ") + "…"
}

func firstParagraph(s string) string {
	p, _, _ := strings.Cut(strings.TrimSpace(s), "\n\n")
	return p
}

func firstSentence(s string) string {
	p := firstParagraph(s)
	if i := strings.Index(p, ". "); i >= 0 {
		return p[:i+1]
	}
	return p
}

package learn

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/aileron-dev/aileron-proxy/internal/hostport"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// DefaultApprovalFor are the methods a draft marks approval: required
// unless told otherwise: a draft errs on the side of a person looking.
var DefaultApprovalFor = []string{"POST", "PUT", "PATCH", "DELETE"}

// Options tune Draft.
type Options struct {
	// FQN names the drafted connector. Required.
	FQN string
	// Version is connector.version; empty means "0.1.0".
	Version string
	// Tool names the one tool; empty means the FQN's last segment without
	// an "aileron-connector-" prefix, lower case.
	Tool string
	// ApprovalFor are the methods whose operations need approval; nil means
	// DefaultApprovalFor, an empty non-nil slice none.
	ApprovalFor []string
	// Documented are operations of a description of the API (an imported
	// OpenAPI document, a hand-written spec): a learned request one of them
	// matches (method, host when it lists hosts, path template) is drafted as
	// that operation, with its name, path, inputs and description; only the
	// documented operations actually called are drafted.
	Documented []policy.Operation
}

// Result is a drafted connector spec and what a person reviews of it.
type Result struct {
	// Spec is the drafted aileron.connector.v1 document; it validates.
	Spec *policy.Spec
	// Operations describe each drafted operation, in the spec's order.
	Operations []Reviewed
	// Unplaced are the learned requests no operation covers, with why.
	Unplaced []Unplaced
	// Credentials are the credentials the operations ask for.
	Credentials []ClientAuth
}

// Reviewed is one drafted operation as the review table shows it.
type Reviewed struct {
	Name, Method, Host string
	// Example is the path with values replaced by template names.
	Example string
	// Requests is how many learned requests it covers.
	Requests int
	// Statuses are the response statuses seen, sorted.
	Statuses []int
	// Documented reports whether a documented operation supplied it.
	Documented bool
	Approval   bool
}

// Unplaced is a learned request left out of the draft. Path is MaskPath's
// shape: no path value leaves the learn record.
type Unplaced struct {
	Method, Host, Path, Reason string
}

// group is the learned requests of one drafted operation.
type group struct {
	host, method, path string
	reqs               []int
	doc                *policy.Operation
}

// Draft turns a learn record into a connector spec. The output depends only
// on the record's requests and opts: the same input gives the same bytes.
func Draft(rec *Record, opts Options) (*Result, error) {
	fqn, err := policy.ParseFQN(opts.FQN)
	if err != nil {
		return nil, fmt.Errorf("drafting a connector: --fqn %q: %w", opts.FQN, err)
	}
	tool := opts.Tool
	if tool == "" {
		last := fqn.Repo
		if n := len(fqn.Subpath); n > 0 {
			last = fqn.Subpath[n-1]
		}
		tool = strings.ToLower(strings.TrimPrefix(last, "aileron-connector-"))
	}
	if !policy.IsValidName(tool) || !policy.IsSafeCommandName(policy.ToolCommand(tool)) {
		return nil, fmt.Errorf("drafting a connector: tool name %q is not a valid command name; pass a tool name such as %q", tool, "learned-api")
	}
	approvalFor := opts.ApprovalFor
	if approvalFor == nil {
		approvalFor = DefaultApprovalFor
	}
	version := cmp.Or(opts.Version, "0.1.0")
	reqs := rec.Requests
	res := &Result{}

	// Documented operations first, then inference for the rest, per host.
	groups := map[string]*group{}
	byHost := map[string][]int{}
	for i, r := range reqs {
		if reason := unplaceable(r); reason != "" {
			res.Unplaced = append(res.Unplaced, Unplaced{r.Method, specHost(r.Host), MaskPath(r.Path), reason})
			continue
		}
		if d := matchDocumented(opts.Documented, r); d != nil {
			k := "doc\x00" + r.Host + "\x00" + d.Name
			g := groups[k]
			if g == nil {
				g = &group{host: r.Host, method: d.Method, path: d.Path, doc: d}
				groups[k] = g
			}
			g.reqs = append(g.reqs, i)
			continue
		}
		byHost[r.Host] = append(byHost[r.Host], i)
	}
	templ := make([]string, len(reqs))
	for _, idx := range byHost {
		inferTemplates(reqs, idx, templ)
		for _, i := range idx {
			r := reqs[i]
			k := r.Host + "\x00" + r.Method + "\x00" + templ[i]
			g := groups[k]
			if g == nil {
				g = &group{host: r.Host, method: r.Method, path: templ[i]}
				groups[k] = g
			}
			g.reqs = append(g.reqs, i)
		}
	}
	ordered := make([]*group, 0, len(groups))
	for _, g := range groups {
		ordered = append(ordered, g)
	}
	slices.SortFunc(ordered, func(a, b *group) int {
		return cmp.Or(strings.Compare(a.host, b.host), strings.Compare(a.path, b.path),
			strings.Compare(methodRank(a.method), methodRank(b.method)))
	})

	spec := &policy.Spec{
		SchemaVersion: policy.SchemaVersion,
		Connector: policy.ConnectorMeta{FQN: fqn.String(), Version: version,
			Description: "Drafted by `aileron-proxy connector draft` from learn session " + rec.Header.SessionID},
		Tools: []policy.Tool{{Name: tool, Description: "Operations learned from session " + rec.Header.SessionID}},
	}
	usedNames := map[string]bool{}
	creds := map[ClientAuth]bool{}
	for _, g := range ordered {
		op := draftOperation(g, reqs)
		op.Name = uniqueName(op.Name, usedNames)
		if (slices.Contains(approvalFor, op.Method) && !isGitFetch(g)) || isGitPush(g) {
			op.Approval = policy.ApprovalRequired
		}
		// Each operation must stand on its own; one that does not validate
		// is reported, not drafted.
		if reason := checkOperation(spec, op); reason != "" {
			for _, i := range g.reqs {
				r := reqs[i]
				res.Unplaced = append(res.Unplaced, Unplaced{r.Method, specHost(r.Host), MaskPath(r.Path), reason})
			}
			continue
		}
		spec.Tools[0].Operations = append(spec.Tools[0].Operations, op)
		if op.Credential.HasCredential() {
			creds[authOf(g, reqs)] = true
		}
		rv := Reviewed{Name: op.Name, Method: op.Method, Host: specHost(g.host), Example: op.Path, Requests: len(g.reqs),
			Documented: g.doc != nil, Approval: op.Approval.IsRequired()}
		for _, i := range g.reqs {
			if s := reqs[i].Status; !slices.Contains(rv.Statuses, s) {
				rv.Statuses = append(rv.Statuses, s)
			}
		}
		slices.Sort(rv.Statuses)
		res.Operations = append(res.Operations, rv)
	}
	if len(spec.Tools[0].Operations) == 0 {
		return res, fmt.Errorf("drafting a connector: the learn record %s holds no request that can become an operation (%d learned, %d unplaced); run the agent in the learn session so it makes its calls", rec.Path, len(reqs), len(res.Unplaced))
	}
	for c := range creds {
		res.Credentials = append(res.Credentials, c)
	}
	slices.SortFunc(res.Credentials, func(a, b ClientAuth) int {
		return cmp.Or(strings.Compare(a.Kind, b.Kind), strings.Compare(a.Header, b.Header))
	})
	slices.SortFunc(res.Unplaced, func(a, b Unplaced) int {
		return cmp.Or(strings.Compare(a.Host, b.Host), strings.Compare(a.Path, b.Path), strings.Compare(a.Method, b.Method), strings.Compare(a.Reason, b.Reason))
	})
	res.Unplaced = slices.Compact(res.Unplaced)
	data, err := res.JSON(spec)
	if err != nil {
		return nil, err
	}
	if _, _, err := policy.ParseSpec(data); err != nil {
		return nil, fmt.Errorf("drafting a connector: the draft does not validate (a bug; please report it): %w", err)
	}
	res.Spec = spec
	return res, nil
}

// JSON renders spec as the indented document written to -o or installed.
func (res *Result) JSON(spec *policy.Spec) ([]byte, error) {
	if spec == nil {
		spec = res.Spec
	}
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding the drafted spec: %w", err)
	}
	return append(b, '\n'), nil
}

func methodRank(m string) string {
	order := []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"}
	if i := slices.Index(order, m); i >= 0 {
		return strconv.Itoa(i) + m
	}
	return "9" + m
}

// unplaceable says why r cannot become part of an operation, or "".
func unplaceable(r Request) string {
	if !strings.HasPrefix(r.Path, "/") {
		return "the path does not start with /"
	}
	if strings.ContainsAny(r.Path, "{}") {
		return "the path holds a brace, which the spec reserves for templates"
	}
	if _, err := hostport.New(r.Host); err != nil {
		return "the host is not host:port"
	}
	return ""
}

// checkOperation reports why op cannot go into spec alone, or "".
func checkOperation(spec *policy.Spec, op policy.Operation) string {
	probe := *spec
	probe.Tools = []policy.Tool{{Name: spec.Tools[0].Name, Operations: []policy.Operation{op}}}
	data, err := json.Marshal(&probe)
	if err != nil {
		return "cannot be encoded"
	}
	if _, _, err := policy.ParseSpec(data); err != nil {
		var ve *policy.ValidationError
		if errors.As(err, &ve) && len(ve.Problems) > 0 {
			return "the spec refuses it: " + ve.Problems[0].Message
		}
		return "the spec refuses it"
	}
	return ""
}

// specHost is the spec spelling of a host:port: no port for 443.
func specHost(hp string) string {
	h, err := hostport.New(hp)
	if err != nil {
		return hp
	}
	if h.Port == 443 || h.Port == 0 {
		return hostport.HostPort{Host: h.Host}.String()
	}
	return h.String()
}

// isGitPush reports whether g is git's push endpoint.
func isGitPush(g *group) bool {
	return g.method == "POST" && strings.HasSuffix(g.path, "/git-receive-pack")
}

// isGitFetch reports whether g is git's read-only fetch endpoint, a POST
// that --approval-for does not cover: clone and fetch read.
func isGitFetch(g *group) bool {
	return g.doc == nil && g.method == "POST" && strings.HasSuffix(g.path, "/git-upload-pack")
}

// gitName names git smart-HTTP operations, or "".
func gitName(method, path string) string {
	switch {
	case method == "GET" && strings.HasSuffix(path, "/info/refs"):
		// Ref discovery serves clone, fetch and push alike (the service
		// query parameter says which; its value is not recorded).
		return "git.info-refs"
	case method == "POST" && strings.HasSuffix(path, "/git-upload-pack"):
		return "git.upload-pack"
	case method == "POST" && strings.HasSuffix(path, "/git-receive-pack"):
		return "git.receive-pack"
	}
	return ""
}

// draftOperation builds the operation of g.
func draftOperation(g *group, reqs []Request) policy.Operation {
	op := policy.Operation{Method: g.method, Path: g.path, Hosts: []string{specHost(g.host)}}
	switch g.method {
	case "GET", "HEAD", "OPTIONS", "PUT", "DELETE":
		op.Idempotency = policy.Idempotent
	default:
		op.Idempotency = policy.NotIdempotent
	}
	if a := authOf(g, reqs); a.Kind != "" {
		op.Credential = policy.CredentialKind(a.Kind)
	}
	if isGitFetch(g) {
		op.Idempotency = policy.Idempotent
	}
	if g.doc != nil {
		d := g.doc
		op.Name, op.Summary, op.Description, op.Inputs = d.Name, d.Summary, d.Description, slices.Clone(d.Inputs)
		op.Audit = slices.Clone(d.Audit)
		if d.Credential != "" {
			op.Credential = d.Credential
		}
		if d.Idempotency != "" {
			op.Idempotency = d.Idempotency
		}
		if d.Approval.IsRequired() {
			op.Approval = policy.ApprovalRequired
		}
		return op
	}
	op.Name = gitName(g.method, g.path)
	if op.Name == "" {
		op.Name = operationName(g.method, g.path)
	}
	op.Summary = fmt.Sprintf("%s %s, learned from %s", g.method, g.path, pluralize(len(g.reqs), "request"))
	op.Inputs = draftInputs(g, reqs)
	return op
}

// authOf is the credential most requests of g sent (ties: bearer, basic,
// api_key); none when most sent none.
func authOf(g *group, reqs []Request) ClientAuth {
	count := map[ClientAuth]int{}
	for _, i := range g.reqs {
		count[reqs[i].Auth]++
	}
	best, n := ClientAuth{}, count[ClientAuth{}]
	keys := make([]ClientAuth, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b ClientAuth) int {
		return cmp.Or(strings.Compare(a.Kind, b.Kind), strings.Compare(a.Header, b.Header))
	})
	for _, k := range keys {
		if k.Kind != "" && count[k] > n {
			best, n = k, count[k]
		}
	}
	return best
}

// operationName derives a name from method and template: the literal
// segments joined by '.', then list/get/create/replace/update/delete.
func operationName(method, path string) string {
	var words []string
	endsInTemplate := false
	for _, seg := range splitPath(path) {
		if strings.HasPrefix(seg, "{") || Classify(seg).IsIdentifier() {
			endsInTemplate = true
			continue
		}
		endsInTemplate = false
		if w := sanitizeName(seg); w != "" {
			words = append(words, strings.ReplaceAll(w, "_", "-"))
		}
	}
	if len(words) == 0 {
		words = []string{"root"}
	}
	if len(words) > 4 {
		words = words[len(words)-4:]
	}
	verb := strings.ToLower(method)
	switch method {
	case "GET":
		verb = "list"
		if endsInTemplate {
			verb = "get"
		}
	case "POST":
		verb = "create"
	case "PUT":
		verb = "replace"
	case "PATCH":
		verb = "update"
	case "DELETE":
		verb = "delete"
	}
	return strings.Join(words, ".") + "." + verb
}

func uniqueName(name string, used map[string]bool) string {
	if len(name) > 100 {
		name = name[:100]
	}
	out := name
	for i := 2; used[out]; i++ {
		out = name + "-" + strconv.Itoa(i)
	}
	used[out] = true
	return out
}

// draftInputs types the path templates, query parameters and JSON body
// keys of g's requests.
func draftInputs(g *group, reqs []Request) []policy.Input {
	var inputs []policy.Input
	seen := map[string]bool{}
	add := func(in policy.Input) {
		if !policy.IsValidName(in.Name) || seen[in.Name] {
			return
		}
		seen[in.Name] = true
		inputs = append(inputs, in)
	}
	tsegs := splitPath(g.path)
	for pos, seg := range tsegs {
		name, _, ok := policy.ParseTemplateSegment(seg)
		if !ok {
			continue
		}
		typ := policy.InputInteger
		for _, i := range g.reqs {
			segs := splitPath(reqs[i].Path)
			if pos >= len(segs) || !isDigits(segs[pos]) {
				typ = policy.InputString
				break
			}
		}
		add(policy.Input{Name: name, Type: typ, Required: true, Description: "path segment"})
	}
	for _, part := range []struct {
		where string
		get   func(Request) []Field
	}{
		{"query parameter", func(r Request) []Field { return r.Query }},
		{"JSON body key", func(r Request) []Field { return r.Body }},
	} {
		var order []string
		types := map[string]string{}
		present := map[string]int{}
		for _, i := range g.reqs {
			for _, f := range part.get(reqs[i]) {
				if _, ok := types[f.Name]; !ok {
					order = append(order, f.Name)
					types[f.Name] = f.Type
				} else {
					types[f.Name] = mergeType(types[f.Name], f.Type)
				}
				present[f.Name]++
			}
		}
		slices.Sort(order)
		for _, name := range order {
			add(policy.Input{Name: name, Type: inputType(types[name]), Required: present[name] == len(g.reqs), Description: part.where})
		}
	}
	return inputs
}

func mergeType(a, b string) string {
	switch {
	case a == b:
		return a
	case a == TypeNull:
		return b
	case b == TypeNull:
		return a
	case (a == TypeInteger && b == TypeNumber) || (a == TypeNumber && b == TypeInteger):
		return TypeNumber
	}
	return TypeString
}

func inputType(t string) policy.InputType {
	switch t {
	case TypeInteger:
		return policy.InputInteger
	case TypeNumber:
		return policy.InputNumber
	case TypeBoolean:
		return policy.InputBoolean
	case TypeArray:
		return policy.InputArray
	case TypeObject:
		return policy.InputObject
	}
	return policy.InputString
}

// matchDocumented returns the documented operation r is, or nil.
func matchDocumented(docs []policy.Operation, r Request) *policy.Operation {
	segs := splitPath(r.Path)
	for i := range docs {
		d := &docs[i]
		if d.Method != r.Method || d.Path == "" {
			continue
		}
		if len(d.Hosts) > 0 && !slices.ContainsFunc(d.Hosts, func(h string) bool { return sameHost(h, r.Host) }) {
			continue
		}
		if templateMatches(splitPath(d.Path), segs) {
			return d
		}
	}
	return nil
}

func sameHost(specHostport, learned string) bool {
	return hostport.Normalize(specHostport, 443) == hostport.Normalize(learned, 443)
}

// templateMatches reports whether the escaped segments segs fit the spec
// template tsegs: literals equal, a "{name}" any non-empty segment, a
// "{name}:verb" a non-empty value followed by ":verb".
func templateMatches(tsegs, segs []string) bool {
	if len(tsegs) != len(segs) {
		return false
	}
	for i, t := range tsegs {
		if _, suffix, ok := policy.ParseTemplateSegment(t); ok {
			v := segs[i]
			if suffix != "" {
				var cut bool
				if v, cut = strings.CutSuffix(v, suffix); !cut {
					return false
				}
			}
			if v == "" {
				return false
			}
			continue
		}
		if t != segs[i] {
			return false
		}
	}
	return true
}

// WriteReview prints the review table, the unplaced requests and the
// credential commands to pair with the draft. It prints names, templates
// and counts, never a value.
func (res *Result) WriteReview(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "OPERATION\tMETHOD\tHOST\tEXAMPLE PATH\tREQUESTS\tSTATUSES\tAPPROVAL\tFROM")
	for _, o := range res.Operations {
		st := make([]string, len(o.Statuses))
		for i, s := range o.Statuses {
			st[i] = strconv.Itoa(s)
		}
		appr, from := "-", "learned"
		if o.Approval {
			appr = "required"
		}
		if o.Documented {
			from = "documented"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", o.Name, o.Method, o.Host, o.Example, o.Requests, strings.Join(st, ","), appr, from)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(res.Unplaced) > 0 {
		fmt.Fprintf(w, "\n%s not placed:\n", pluralize(len(res.Unplaced), "learned request"))
		for _, u := range res.Unplaced {
			fmt.Fprintf(w, "  %s %s %s: %s\n", u.Method, u.Host, u.Path, u.Reason)
		}
	}
	return nil
}

// CredentialCommands returns the `credential set` commands that pair with
// the draft's credentials, one per kind.
func (res *Result) CredentialCommands() []string {
	if res.Spec == nil {
		return nil
	}
	fqn := res.Spec.Connector.FQN
	var out []string
	for _, c := range res.Credentials {
		switch c.Kind {
		case "basic":
			out = append(out, fmt.Sprintf("aileron-proxy credential set %s --kind basic --username USER --from-env VAR", fqn))
		case "api_key":
			out = append(out, fmt.Sprintf("aileron-proxy credential set %s --kind api_key --header %s --from-env VAR", fqn, c.Header))
		default:
			out = append(out, fmt.Sprintf("aileron-proxy credential set %s --kind %s --from-env VAR", fqn, c.Kind))
		}
	}
	return out
}

func pluralize(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}

// Package openapiimport turns an OpenAPI description (Swagger 2.0, OpenAPI
// 3.0 or 3.1, JSON or YAML) into an aileron.connector.v1 spec: one
// operation per documented operation, with its hosts, path template, inputs,
// method facts and credential kind. The mapping is deterministic (the same
// document and options give the same bytes) and documented rule by rule in
// docs/import.md. Parsing and $ref resolution are libopenapi's; this package
// reads local files only and never fetches anything.
package openapiimport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/aileron-dev/aileron-proxy/policy"
)

// Options are the choices of an import, one per flag of `connector import`.
type Options struct {
	// FQN names the connector (required).
	FQN string
	// Version is the connector version; "" takes the document's info.version
	// when it is a semantic version, else leaves the spec unversioned.
	Version string
	// Tool names the tool; "" derives it from the FQN's repository.
	Tool string
	// Hosts replace the hosts the document's servers give (host[:port]).
	Hosts []string
	// ServerVars set server variables, overriding their defaults.
	ServerVars map[string]string
	// Include and Exclude are "METHOD PATHGLOB" rules; Tags and
	// OperationIDs select by the document's tags and operationId globs.
	Include, Exclude []string
	Tags             []string
	OperationIDs     []string
	// Credential, when set, is every operation's credential kind.
	Credential policy.CredentialKind
	// ApprovalFor lists methods whose operations require approval.
	ApprovalFor []string
	// Update, when set, is an existing spec of the connector that the import
	// updates: its operation names, the fields a person sets, the
	// operations the document does not describe and its other tools are
	// kept (docs/import.md, "Updating a spec"). FQN, Version and Tool
	// default to its own. Nil imports from scratch.
	Update *policy.Spec
}

// Result is an import's spec and what it could not express.
type Result struct {
	// Spec is the valid spec; JSON is its rendering (what -o writes).
	Spec *policy.Spec
	JSON []byte
	// Imported counts the operations imported from the document.
	Imported int
	// DocumentOperations counts the document's operations (before filters).
	DocumentOperations int
	// Filtered counts operations left out by the filters or x-aileron-skip.
	Filtered int
	// Skipped lists operations that could not be imported, with the reason.
	Skipped []Note
	// Notes lists constructs each imported operation could not express
	// (header and cookie parameters, non-JSON bodies, renamed templates,
	// name collisions, servers left out).
	Notes []Note
	// Credentials are the credential set commands, one per scheme used.
	Credentials []CredentialHint
	// Matched counts the imported operations that took the name of an
	// operation of Options.Update on the same route.
	Matched int
	// Carried lists the operations of Options.Update the document does
	// not describe, kept unchanged.
	Carried []Note
}

// Note is one entry of the end-of-import summary.
type Note struct {
	// Where is "METHOD /path" (or "" for the document).
	Where string
	Msg   string
}

// String returns "METHOD /path: message".
func (n Note) String() string {
	if n.Where == "" {
		return n.Msg
	}
	return n.Where + ": " + n.Msg
}

// ErrNoOperations marks an import whose filters (or document) leave no
// operation.
var ErrNoOperations = errors.New("no operations to import")

// Import maps the description src onto a spec.
func Import(src Source, opts Options) (*Result, error) {
	if opts.Update != nil {
		if err := applyUpdateDefaults(&opts); err != nil {
			return nil, err
		}
	}
	if _, err := policy.ParseFQN(opts.FQN); err != nil {
		return nil, fmt.Errorf("--fqn %q: %w", opts.FQN, err)
	}
	if opts.Version != "" && !policy.IsValidVersion(opts.Version) {
		return nil, fmt.Errorf("--version %q must be a semantic version such as 1.2.3", opts.Version)
	}
	if opts.Credential != "" && !slices.Contains([]policy.CredentialKind{policy.CredentialBearer, policy.CredentialAPIKey, policy.CredentialBasic, policy.CredentialOAuth2, policy.CredentialNone}, opts.Credential) {
		return nil, fmt.Errorf("--credential %q is not a credential kind; use bearer, api_key, basic, oauth2 or none", opts.Credential)
	}
	f, err := newFilter(opts)
	if err != nil {
		return nil, err
	}
	approval := map[string]bool{}
	for _, m := range opts.ApprovalFor {
		for _, one := range strings.Split(m, ",") {
			if one = strings.ToUpper(strings.TrimSpace(one)); one != "" {
				approval[one] = true
			}
		}
	}
	l, err := load(src)
	if err != nil {
		return nil, err
	}
	d, err := l.model(src.Name)
	if err != nil {
		return nil, err
	}
	r, err := build(src.Name, d, opts, f, approval)
	if err != nil || opts.Update == nil {
		return r, err
	}
	if err := mergeUpdate(r, opts); err != nil {
		return nil, err
	}
	return r, nil
}

// build maps the neutral model onto a spec.
func build(name string, d *docModel, opts Options, f *filter, approval map[string]bool) (*Result, error) {
	r := &Result{DocumentOperations: len(d.ops)}
	tool := opts.Tool
	if tool == "" {
		fqn, _ := policy.ParseFQN(opts.FQN)
		tool = strings.TrimPrefix(strings.ToLower(fqn.Repo), "aileron-connector-")
	}
	version := opts.Version
	if version == "" && policy.IsValidVersion(d.version) {
		version = d.version
	}
	hostsCache := map[string]hostSet{}
	docHosts, err := resolveHosts(d.servers, opts, r, "")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	hostsCache[""] = docHosts

	ops := slices.Clone(d.ops)
	sort.SliceStable(ops, func(i, j int) bool {
		if ops[i].path != ops[j].path {
			return ops[i].path < ops[j].path
		}
		return methodRank(ops[i].method) < methodRank(ops[j].method)
	})

	var out []policy.Operation
	var origin []docOp
	usedSchemes := map[string]bool{}
	for _, o := range ops {
		where := o.method + " " + o.path
		if strings.EqualFold(o.ext["x-aileron-skip"], "true") || !f.selects(o) {
			r.Filtered++
			continue
		}
		if !isSpecMethod(o.method) {
			r.Skipped = append(r.Skipped, Note{where, fmt.Sprintf("method %s cannot be declared in a connector spec (GET, HEAD, POST, PUT, PATCH, DELETE only)", o.method)})
			continue
		}
		if strings.Contains(o.path, "{+") || strings.Contains(o.path, "{/") || strings.Contains(o.path, "{?") {
			r.Skipped = append(r.Skipped, Note{where, "reserved or multi-segment template (RFC 6570 {+name}, {/name}, {?name}) cannot be expressed: a template matches one whole segment"})
			continue
		}
		hosts := docHosts
		if o.servers != nil && len(opts.Hosts) == 0 {
			key := serversKey(o.servers)
			h, ok := hostsCache[key]
			if !ok {
				h, err = resolveHosts(o.servers, opts, r, where)
				if err != nil {
					return nil, fmt.Errorf("%s: %s: %w", name, o.pointer, err)
				}
				hostsCache[key] = h
			}
			hosts = h
		}
		op, schemeName := mapOperation(o, d, opts, approval, hosts, r)
		if schemeName != "" && !opts.Credential.HasCredential() {
			usedSchemes[schemeName] = true
		}
		out = append(out, op)
		origin = append(origin, o)
	}
	nameOperations(out, origin, r)

	spec := &policy.Spec{
		SchemaVersion: policy.SchemaVersion,
		Connector:     policy.ConnectorMeta{FQN: opts.FQN, Version: version},
		Tools:         []policy.Tool{{Name: tool, Operations: out}},
	}
	// Let the spec's own validation decide what it can express: an operation
	// it refuses is reported and left out, and the rest validated again.
	for {
		if len(spec.Tools[0].Operations) == 0 {
			return nil, fmt.Errorf("%s: %w: the document has %d operations and %d were filtered out, %d skipped; loosen --include/--exclude/--tag/--operation-id",
				name, ErrNoOperations, r.DocumentOperations, r.Filtered, len(r.Skipped))
		}
		data, err := render(spec)
		if err != nil {
			return nil, err
		}
		parsed, _, err := policy.ParseSpec(data)
		if err == nil {
			r.Spec, r.JSON = parsed, data
			r.Imported = len(parsed.Tools[0].Operations)
			break
		}
		var ve *policy.ValidationError
		if !errors.As(err, &ve) {
			return nil, fmt.Errorf("validating the imported spec: %w", err)
		}
		bad := map[int]string{}
		for _, p := range ve.Problems {
			i, ok := opIndex(p.Path)
			if !ok {
				return nil, fmt.Errorf("the imported spec is not valid: %s", p)
			}
			if _, seen := bad[i]; !seen {
				bad[i] = p.Message
			}
		}
		var keep []policy.Operation
		var keepOrigin []docOp
		for i, op := range spec.Tools[0].Operations {
			if msg, ok := bad[i]; ok {
				r.Skipped = append(r.Skipped, Note{origin[i].method + " " + origin[i].path, "refused by the spec grammar: " + msg})
				continue
			}
			keep = append(keep, op)
			keepOrigin = append(keepOrigin, origin[i])
		}
		spec.Tools[0].Operations, origin = keep, keepOrigin
	}
	if !opts.Credential.HasCredential() {
		for _, n := range sortedKeys(usedSchemes) {
			r.Credentials = append(r.Credentials, hint(opts.FQN, tool, n, d.schemes[n]))
		}
	} else {
		r.Credentials = append(r.Credentials, hint(opts.FQN, tool, "--credential", overrideScheme(opts.Credential)))
	}
	return r, nil
}

// opIndex parses "tools[0].operations[N]..." into N.
func opIndex(path string) (int, bool) {
	const prefix = "tools[0].operations["
	if !strings.HasPrefix(path, prefix) {
		return 0, false
	}
	rest := path[len(prefix):]
	end := strings.IndexByte(rest, ']')
	if end < 0 {
		return 0, false
	}
	n, err := strconv.Atoi(rest[:end])
	return n, err == nil
}

// render writes spec as indented JSON with a final newline.
func render(spec *policy.Spec) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(spec); err != nil {
		return nil, fmt.Errorf("rendering the spec: %w", err)
	}
	return buf.Bytes(), nil
}

// methodRank orders methods within a path.
func methodRank(m string) int {
	i := slices.Index([]string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "QUERY"}, m)
	if i < 0 {
		return 99
	}
	return i
}

func isSpecMethod(m string) bool {
	switch m {
	case "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE":
		return true
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

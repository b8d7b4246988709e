// Package graphqlimport turns a GraphQL schema (SDL) into an
// aileron.connector.v1 spec: one operation per field of the query root
// type and per field of the mutation root type, each a "graphql" rule on
// one host and path, mutations requiring approval by default. The result is
// an ordinary spec a person reviews before installing it. Parsing is
// gqlparser's (no validation against the GraphQL specification's built-ins
// is needed to read the root types); this package reads what it is given
// and never fetches anything.
package graphqlimport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"

	"github.com/aileron-dev/aileron-proxy/internal/hostport"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// Options are the choices of an import, one per flag of `connector import
// --graphql`.
type Options struct {
	// FQN names the connector (required).
	FQN string
	// Version is the connector version; "" leaves the spec unversioned.
	Version string
	// Tool names the tool; "" derives it from the FQN's repository.
	Tool string
	// Host is the GraphQL endpoint's host[:port] (required).
	Host string
	// Path is the endpoint's path; "" means "/graphql".
	Path string
	// Credential, when set, is every operation's credential kind.
	Credential policy.CredentialKind
	// MutationsWithoutApproval leaves approval off mutations; false (the
	// default) requires a person's approval for each.
	MutationsWithoutApproval bool
}

// Result is an import's spec and its counts.
type Result struct {
	// Spec is the valid spec; JSON is its rendering (what -o writes).
	Spec *policy.Spec
	JSON []byte
	// Queries and Mutations count the operations drafted of each type.
	Queries, Mutations int
	// Subscriptions counts subscription root fields, which are not drafted.
	Subscriptions int
}

// ErrNoOperations marks a schema without query or mutation fields.
var ErrNoOperations = errors.New("no query or mutation fields to import")

// maxSummary bounds an operation summary taken from a field description.
const maxSummary = 200

// Import drafts a spec from the SDL schema.
func Import(sdl []byte, opts Options) (*Result, error) {
	fqn, err := policy.ParseFQN(opts.FQN)
	if err != nil {
		return nil, fmt.Errorf("--fqn: %w", err)
	}
	hp, err := hostport.New(opts.Host)
	if err != nil || opts.Host == "" {
		return nil, fmt.Errorf("--host %q is not a host[:port], e.g. api.github.com: %w", opts.Host, errOr(err))
	}
	path := opts.Path
	if path == "" {
		path = "/graphql"
	}
	tool := opts.Tool
	if tool == "" {
		tool = strings.TrimPrefix(strings.ToLower(fqn.Repo), "aileron-connector-")
	}
	doc, err := parser.ParseSchema(&ast.Source{Name: "schema", Input: string(sdl)})
	if err != nil {
		return nil, fmt.Errorf("parsing the schema: %w", err)
	}
	roots := rootNames(doc)
	fields := func(typ string) ast.FieldList {
		var out ast.FieldList
		for _, d := range doc.Definitions {
			if d.Name == typ && d.Kind == ast.Object {
				out = append(out, d.Fields...)
			}
		}
		for _, d := range doc.Extensions {
			if d.Name == typ && d.Kind == ast.Object {
				out = append(out, d.Fields...)
			}
		}
		return out
	}
	res := &Result{Subscriptions: len(fields(roots[ast.Subscription]))}
	spec := &policy.Spec{SchemaVersion: policy.SchemaVersion,
		Connector: policy.ConnectorMeta{FQN: fqn.String(), Version: opts.Version,
			Description: fmt.Sprintf("Drafted from a GraphQL schema for %s%s; review before installing", hp.String(), path)}}
	t := policy.Tool{Name: tool}
	for _, kind := range []ast.Operation{ast.Query, ast.Mutation} {
		fl := fields(roots[kind])
		sort.SliceStable(fl, func(i, j int) bool { return fl[i].Name < fl[j].Name })
		seen := map[string]bool{}
		for _, f := range fl {
			if seen[f.Name] || strings.HasPrefix(f.Name, "__") {
				continue
			}
			seen[f.Name] = true
			op := policy.Operation{
				Name: string(kind) + "." + f.Name, Summary: summary(f.Description),
				Method: "POST", Path: path, Hosts: []string{hp.String()},
				Credential: opts.Credential,
				GraphQL:    &policy.GraphQLRule{Type: policy.GraphQLOperationType(kind), Fields: []string{f.Name}},
			}
			if d := f.Directives.ForName("deprecated"); d != nil {
				op.Summary = strings.TrimSpace("Deprecated. " + op.Summary)
			}
			if kind == ast.Query {
				op.Idempotency = policy.Idempotent
				res.Queries++
			} else {
				op.Idempotency = policy.NotIdempotent
				if !opts.MutationsWithoutApproval {
					op.Approval = policy.ApprovalRequired
				}
				res.Mutations++
			}
			t.Operations = append(t.Operations, op)
		}
	}
	if len(t.Operations) == 0 {
		return nil, ErrNoOperations
	}
	spec.Tools = []policy.Tool{t}
	data, err := render(spec)
	if err != nil {
		return nil, err
	}
	parsed, _, err := policy.ParseSpec(data)
	if err != nil {
		return nil, fmt.Errorf("the drafted spec is not valid: %w", err)
	}
	res.Spec, res.JSON = parsed, data
	return res, nil
}

func errOr(err error) error {
	if err == nil {
		return errors.New("it is empty")
	}
	return err
}

// rootNames returns the root type of each operation type: as the schema
// definition names them, else Query, Mutation and Subscription.
func rootNames(doc *ast.SchemaDocument) map[ast.Operation]string {
	roots := map[ast.Operation]string{ast.Query: "Query", ast.Mutation: "Mutation", ast.Subscription: "Subscription"}
	for _, list := range []ast.SchemaDefinitionList{doc.Schema, doc.SchemaExtension} {
		for _, sd := range list {
			for _, ot := range sd.OperationTypes {
				roots[ot.Operation] = ot.Type
			}
		}
	}
	return roots
}

// summary is the first line of a description, shortened.
func summary(desc string) string {
	s := strings.TrimSpace(desc)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[:i])
	}
	if len(s) > maxSummary {
		cut := maxSummary
		for cut > 0 && s[cut]&0xC0 == 0x80 { // do not split a UTF-8 sequence
			cut--
		}
		s = strings.TrimSpace(s[:cut]) + "…"
	}
	return s
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

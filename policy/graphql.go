package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"
)

// This file reads GraphQL requests: the JSON envelope of a POST (or the
// query string of a GET), the executed operation of its document (parsed
// with gqlparser, no schema) and its top-level fields, and then picks the
// operation of an Inspection that allows it. It is pure; the proxy reads
// the bounded body and acts on the answer.

// MaxGraphQLTokens bounds the tokens of one GraphQL document.
const MaxGraphQLTokens = 100_000

// maxFragmentDepth bounds the nesting of top-level fragment spreads.
const maxFragmentDepth = 32

// GraphQLRequest is one GraphQL request of an envelope: what the proxy
// needs of it. Variables are never read.
type GraphQLRequest struct {
	// Query is the document; empty for a persisted query sent by hash.
	Query string
	// OperationName selects the executed operation; "" when absent.
	OperationName string
	// PersistedHash is extensions.persistedQuery.sha256Hash; "" when
	// absent.
	PersistedHash string
}

// GraphQLSelection is what one GraphQL request executes: never a
// variable or an argument.
type GraphQLSelection struct {
	// Type is the executed operation's type.
	Type GraphQLOperationType
	// Name is the operation's name; "" for an anonymous one.
	Name string
	// Fields are the distinct top-level field names it selects, aliases
	// resolved and top-level fragments expanded, in document order.
	Fields []string
	// PersistedHash is set, with Fields empty, for a persisted query sent
	// by hash alone.
	PersistedHash string
}

// GraphQLError is a GraphQL request refused: Rule is a stable name of the
// rule that failed, Message says what and how to fix it.
type GraphQLError struct {
	Rule    string
	Message string
}

func (e *GraphQLError) Error() string { return e.Message }

func gqlErr(rule, format string, args ...any) *GraphQLError {
	return &GraphQLError{Rule: rule, Message: fmt.Sprintf(format, args...)}
}

// Rules a GraphQLError names.
const (
	GraphQLRuleEnvelope     = "envelope"
	GraphQLRuleParse        = "parse"
	GraphQLRuleOperation    = "operation_selection"
	GraphQLRuleField        = "field_not_allowed"
	GraphQLRuleType         = "operation_type"
	GraphQLRulePersisted    = "persisted_query"
	GraphQLRuleBatch        = "batch"
	GraphQLRuleBatchDiffers = "batch_mixes_operations"
)

// ParseGraphQLBody reads a POST body: one JSON object {query,
// operationName, variables, extensions}, or a JSON array of them (a batch,
// batch true). Keys are matched exactly, and a repeated key, a key that
// differs from a known one only in case, or any other key is refused:
// upstream JSON readers disagree on which copy wins, and a server may run
// a document another key names.
func ParseGraphQLBody(body []byte) (reqs []GraphQLRequest, batch bool, err error) {
	if !utf8.Valid(body) {
		return nil, false, gqlErr(GraphQLRuleEnvelope, "the GraphQL request body is not valid UTF-8; send a JSON object {\"query\": ...}")
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var elems []json.RawMessage
		if err := json.Unmarshal(body, &elems); err != nil {
			return nil, true, gqlErr(GraphQLRuleEnvelope, "the GraphQL batch is not a JSON array of request objects: %s", jsonProblem(err))
		}
		if len(elems) == 0 {
			return nil, true, gqlErr(GraphQLRuleBatch, "the GraphQL batch is empty; send at least one request object")
		}
		for i, el := range elems {
			r, err := parseGraphQLObject(el)
			if err != nil {
				err.Message = fmt.Sprintf("batch element %d: %s", i, err.Message)
				return nil, true, err
			}
			reqs = append(reqs, r)
		}
		return reqs, true, nil
	}
	r, gerr := parseGraphQLObject(body)
	if gerr != nil {
		return nil, false, gerr
	}
	return []GraphQLRequest{r}, false, nil
}

func jsonProblem(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s at byte %d", se.Error(), se.Offset)
	}
	return err.Error()
}

var graphQLKeys = []string{"query", "operationName", "variables", "extensions"}

// parseGraphQLObject reads one request object.
func parseGraphQLObject(raw []byte) (GraphQLRequest, *GraphQLError) {
	var r GraphQLRequest
	dec := json.NewDecoder(bytes.NewReader(raw))
	bad := func(err error) (GraphQLRequest, *GraphQLError) {
		return r, gqlErr(GraphQLRuleEnvelope, "the GraphQL request is not a JSON object {\"query\": ..., \"operationName\": ..., \"variables\": ...}: %s", jsonProblem(err))
	}
	tok, err := dec.Token()
	if err != nil {
		return bad(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return bad(errors.New("it does not start with '{'"))
	}
	seen := map[string]bool{}
	var hasQuery bool
	var ext json.RawMessage
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return bad(err)
		}
		key, _ := tok.(string)
		if seen[key] {
			return r, gqlErr(GraphQLRuleEnvelope, "the GraphQL request repeats the key %q; send each key once", key)
		}
		seen[key] = true
		for _, k := range graphQLKeys {
			if key != k && strings.EqualFold(key, k) {
				return r, gqlErr(GraphQLRuleEnvelope, "the GraphQL request has the key %q; spell it %q", key, k)
			}
		}
		if !slices.Contains(graphQLKeys, key) {
			// A server may run what another key names (a stored
			// document's id, for one) instead of the query checked here.
			return r, gqlErr(GraphQLRuleEnvelope, "the GraphQL request has the key %q, which the proxy cannot check; send only query, operationName, variables and extensions", printable(key))
		}
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return bad(err)
		}
		switch key {
		case "query", "operationName":
			var s *string
			if err := json.Unmarshal(val, &s); err != nil {
				return r, gqlErr(GraphQLRuleEnvelope, "the GraphQL request's %q must be a string or null", key)
			}
			if s == nil {
				continue
			}
			if key == "query" {
				r.Query, hasQuery = *s, true
			} else {
				r.OperationName = *s
			}
		case "extensions":
			ext = val
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return bad(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return r, gqlErr(GraphQLRuleEnvelope, "the GraphQL request has data after its JSON object; send one object (or an array for a batch)")
	}
	if len(ext) > 0 && !bytes.Equal(ext, []byte("null")) {
		var e struct {
			PersistedQuery *struct {
				SHA256Hash string `json:"sha256Hash"`
			} `json:"persistedQuery"`
		}
		if err := json.Unmarshal(ext, &e); err != nil {
			return r, gqlErr(GraphQLRuleEnvelope, "the GraphQL request's \"extensions\" must be an object")
		}
		if e.PersistedQuery != nil {
			r.PersistedHash = e.PersistedQuery.SHA256Hash
			if r.PersistedHash == "" {
				return r, gqlErr(GraphQLRulePersisted, "extensions.persistedQuery has no sha256Hash")
			}
		}
	}
	if !hasQuery && r.PersistedHash == "" {
		return r, gqlErr(GraphQLRuleEnvelope, "the GraphQL request has no \"query\"; send {\"query\": \"{ viewer { login } }\"}")
	}
	return r, nil
}

// ParseGraphQLQuery reads a GET request's query string: query,
// operationName, variables and extensions (JSON). A repeated or unknown
// parameter is refused.
func ParseGraphQLQuery(rawQuery string) (GraphQLRequest, error) {
	var r GraphQLRequest
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return r, gqlErr(GraphQLRuleEnvelope, "the query string does not parse: %s", err.Error())
	}
	for k, vs := range q {
		if !slices.Contains(graphQLKeys, k) {
			return r, gqlErr(GraphQLRuleEnvelope, "the query string has %q, which the proxy cannot check; send only query, operationName, variables and extensions", printable(k))
		}
		if len(vs) > 1 {
			return r, gqlErr(GraphQLRuleEnvelope, "the query string has %q %d times; send each parameter once", k, len(vs))
		}
	}
	obj := map[string]any{}
	if vs, ok := q["query"]; ok {
		obj["query"] = vs[0]
	}
	if vs, ok := q["operationName"]; ok {
		obj["operationName"] = vs[0]
	}
	if vs, ok := q["extensions"]; ok {
		obj["extensions"] = json.RawMessage(vs[0])
		if !json.Valid([]byte(vs[0])) {
			return r, gqlErr(GraphQLRuleEnvelope, "the query string's extensions is not JSON")
		}
	}
	b, _ := json.Marshal(obj)
	req, gerr := parseGraphQLObject(b)
	if gerr != nil {
		return req, gerr
	}
	return req, nil
}

// ExtractGraphQL parses r's document and returns what its executed
// operation selects. A persisted query sent by hash alone yields only the
// hash; one sent with its query must hash to it.
func ExtractGraphQL(r GraphQLRequest) (GraphQLSelection, error) {
	var sel GraphQLSelection
	if r.Query == "" {
		if r.PersistedHash == "" {
			return sel, gqlErr(GraphQLRuleEnvelope, "the GraphQL request has an empty query")
		}
		sel.PersistedHash = r.PersistedHash
		return sel, nil
	}
	if r.PersistedHash != "" {
		sum := sha256.Sum256([]byte(r.Query))
		if !strings.EqualFold(hex.EncodeToString(sum[:]), r.PersistedHash) {
			return sel, gqlErr(GraphQLRulePersisted, "extensions.persistedQuery.sha256Hash is not the SHA-256 of the query sent with it; send the matching hash or no extensions")
		}
	}
	doc, err := parser.ParseQueryWithTokenLimit(&ast.Source{Input: r.Query}, MaxGraphQLTokens)
	if err != nil {
		return sel, gqlErr(GraphQLRuleParse, "the GraphQL document does not parse: %s", err.Error())
	}
	var op *ast.OperationDefinition
	switch {
	case len(doc.Operations) == 0:
		return sel, gqlErr(GraphQLRuleOperation, "the GraphQL document has no operation, only fragments")
	case r.OperationName != "":
		for _, o := range doc.Operations {
			if o.Name == r.OperationName {
				if op != nil {
					return sel, gqlErr(GraphQLRuleOperation, "the GraphQL document has two operations named %q", r.OperationName)
				}
				op = o
			}
		}
		if op == nil {
			return sel, gqlErr(GraphQLRuleOperation, "operationName %q names no operation of the document", r.OperationName)
		}
	case len(doc.Operations) > 1:
		return sel, gqlErr(GraphQLRuleOperation, "the GraphQL document has %d operations and no operationName; send operationName to say which one runs", len(doc.Operations))
	default:
		op = doc.Operations[0]
	}
	sel.Name = op.Name
	switch op.Operation {
	case ast.Query:
		sel.Type = GraphQLQuery
	case ast.Mutation:
		sel.Type = GraphQLMutation
	case ast.Subscription:
		sel.Type = GraphQLSubscription
	default:
		return sel, gqlErr(GraphQLRuleOperation, "unknown operation type %q", op.Operation)
	}
	if err := collectFields(doc, op.SelectionSet, &sel.Fields, nil); err != nil {
		return sel, err
	}
	if len(sel.Fields) == 0 {
		return sel, gqlErr(GraphQLRuleParse, "the GraphQL operation selects no fields")
	}
	return sel, nil
}

// collectFields appends the field names of set to out, expanding inline
// fragments and fragment spreads; path is the chain of spread fragments,
// to refuse cycles.
func collectFields(doc *ast.QueryDocument, set ast.SelectionSet, out *[]string, path []string) *GraphQLError {
	for _, s := range set {
		switch s := s.(type) {
		case *ast.Field:
			if !slices.Contains(*out, s.Name) {
				*out = append(*out, s.Name)
			}
		case *ast.InlineFragment:
			if err := collectFields(doc, s.SelectionSet, out, path); err != nil {
				return err
			}
		case *ast.FragmentSpread:
			if slices.Contains(path, s.Name) {
				return gqlErr(GraphQLRuleParse, "fragment %q spreads itself; fragments must not form cycles", s.Name)
			}
			if len(path) >= maxFragmentDepth {
				return gqlErr(GraphQLRuleParse, "top-level fragments nest deeper than %d", maxFragmentDepth)
			}
			f := doc.Fragments.ForName(s.Name)
			if f == nil {
				return gqlErr(GraphQLRuleParse, "fragment %q is spread but not defined in the document", s.Name)
			}
			if err := collectFields(doc, f.SelectionSet, out, append(path, s.Name)); err != nil {
				return err
			}
		}
	}
	return nil
}

const allowedOnPath = "; allowed on this path: "

// SelectGraphQL returns the candidate operation that allows sel: of sel's
// type, declaring every field it selects (or its persisted hash). The
// error names the field or rule that failed and lists what the path
// allows.
func (in *Inspection) SelectGraphQL(sel GraphQLSelection) (*Match, error) {
	var typed bool
	var missing string
	for _, m := range in.cands {
		p := m.Compiled.graphql
		if p == nil || p.typ != sel.Type && sel.PersistedHash == "" {
			continue
		}
		typed = true
		if sel.PersistedHash != "" {
			if p.AllowsHash(strings.ToLower(sel.PersistedHash)) {
				return m, nil
			}
			continue
		}
		ok := true
		for _, f := range sel.Fields {
			if !p.AllowsField(f) {
				ok = false
				if missing == "" {
					missing = f
				}
				break
			}
		}
		if ok {
			return m, nil
		}
	}
	allowed := allowedOnPath + strings.Join(in.allowed, "; ")
	switch {
	case sel.PersistedHash != "":
		return nil, gqlErr(GraphQLRulePersisted, "a persisted query sent by its hash alone (%s) is not one this session allows; send the query text%s", printable(sel.PersistedHash), allowed)
	case !typed:
		return nil, gqlErr(GraphQLRuleType, "%s %s is a %s, and this path allows no %s%s", sel.Type, orAnonymous(sel.Name), sel.Type, sel.Type, allowed)
	}
	for _, f := range sel.Fields {
		if !in.anyAllows(sel.Type, f) {
			missing = f
			break
		}
	}
	if in.anyAllows(sel.Type, missing) {
		return nil, gqlErr(GraphQLRuleField, "%s %s selects fields (%s) that no one operation allows together; send them in separate requests%s",
			sel.Type, orAnonymous(sel.Name), strings.Join(sel.Fields, ", "), allowed)
	}
	return nil, gqlErr(GraphQLRuleField, "%s %s selects the top-level field %q, which no operation of this session allows%s",
		sel.Type, orAnonymous(sel.Name), missing, allowed)
}

func (in *Inspection) anyAllows(t GraphQLOperationType, f string) bool {
	for _, m := range in.cands {
		if p := m.Compiled.graphql; p != nil && p.typ == t && p.AllowsField(f) {
			return true
		}
	}
	return false
}

func orAnonymous(name string) string {
	if name == "" {
		return "(anonymous)"
	}
	return printable(name)
}

// GraphQLDecision is the answer for a whole GraphQL request (one or a
// batch).
type GraphQLDecision struct {
	// Match is the operation whose credential, approval and audit apply:
	// the first element's.
	Match *Match
	// Approval reports whether any element's operation requires a
	// person's approval.
	Approval bool
	// Selections are what each element executes, in order.
	Selections []GraphQLSelection
}

// DecideGraphQL checks every request of an envelope: each must be allowed
// by an operation, and the operations of a batch must share connector and
// credential, so one injection serves them all. The first refusal wins and
// says which element failed; its decision still holds the selections read
// up to and including the refused one, for the audit.
func (in *Inspection) DecideGraphQL(reqs []GraphQLRequest, batch bool) (GraphQLDecision, error) {
	var d GraphQLDecision
	for i, r := range reqs {
		sel, err := ExtractGraphQL(r)
		if err == nil {
			d.Selections = append(d.Selections, sel)
			var m *Match
			if m, err = in.SelectGraphQL(sel); err == nil {
				op := m.Compiled.op
				if d.Match == nil {
					d.Match = m
				} else if first := d.Match.Compiled.op; d.Match.ConnectorFQN != m.ConnectorFQN || first.Credential != op.Credential {
					err = gqlErr(GraphQLRuleBatchDiffers, "it is %s %s of %s, with another connector or credential than element 0 (%s %s of %s); send them as separate requests",
						m.Tool, op.Name, m.ConnectorFQN, d.Match.Tool, first.Name, d.Match.ConnectorFQN)
				}
				d.Approval = d.Approval || op.Approval.IsRequired()
			}
		}
		if err != nil {
			return GraphQLDecision{Selections: d.Selections}, in.graphQLRefusal(err, batch, i)
		}
	}
	if d.Match == nil {
		return GraphQLDecision{}, gqlErr(GraphQLRuleBatch, "the GraphQL request holds no operation")
	}
	return d, nil
}

// graphQLRefusal says which batch element failed and lists what the path
// allows, once.
func (in *Inspection) graphQLRefusal(err error, batch bool, i int) error {
	var ge *GraphQLError
	if !errors.As(err, &ge) {
		return err
	}
	msg := ge.Message
	if batch {
		msg = fmt.Sprintf("batch element %d: %s", i, msg)
	}
	if !strings.Contains(msg, allowedOnPath) {
		msg += allowedOnPath + strings.Join(in.allowed, "; ")
	}
	return &GraphQLError{Rule: ge.Rule, Message: msg}
}

// RefuseGraphQL turns an error of ParseGraphQLBody or ParseGraphQLQuery
// into the refusal DecideGraphQL would give: it lists what the path
// allows.
func (in *Inspection) RefuseGraphQL(err error) error { return in.graphQLRefusal(err, false, 0) }

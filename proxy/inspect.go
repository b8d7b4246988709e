package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/aileron-dev/aileron-proxy/internal/contract"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// This file holds the body inspection of requests whose path holds
// operations with a graphql or an mcp rule (policy's Inspection): the body
// is read whole, bounded, and checked before anything is decided, then
// forwarded byte for byte. Requests to other paths never come here, so
// they cost what they did before.

// MaxInspectedBody is the largest request body the proxy reads to decide
// which GraphQL or MCP operation a request is; a larger one is refused
// with 413.
const MaxInspectedBody = 4 << 20

// inspected is what body inspection adds to a decision.
type inspected struct {
	// approval holds the call for a person: an MCP tool in approval_tools
	// or a batch element whose operation requires it.
	approval bool
	// fields are audit fields describing the body (never its values).
	fields map[string]string
}

// errBodyTooLarge reports an inspected body over MaxInspectedBody.
var errBodyTooLarge = errors.New("inspected request body too large")

// readInspected reads r's whole body (at most MaxInspectedBody bytes) and
// makes r send exactly those bytes with a Content-Length.
func readInspected(r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		r.Body, r.ContentLength = http.NoBody, 0
		return nil, nil
	}
	var buf bytes.Buffer
	if r.ContentLength > 0 && r.ContentLength <= MaxInspectedBody {
		buf.Grow(int(r.ContentLength))
	}
	n, err := buf.ReadFrom(io.LimitReader(r.Body, MaxInspectedBody+1))
	if err != nil {
		return nil, fmt.Errorf("reading the request body: %w", err)
	}
	if n > MaxInspectedBody {
		return nil, errBodyTooLarge
	}
	_ = r.Body.Close()
	data := buf.Bytes()
	r.Body = io.NopCloser(bytes.NewReader(data))
	r.ContentLength, r.TransferEncoding, r.Trailer = n, nil, nil
	return data, nil
}

// inspectBody decides among the operations of in by the request's body.
// It returns the chosen operation as an allowing policy decision, or the
// refusal.
func (s *Server) inspectBody(x *exchange, in *policy.Inspection) (policy.Decision, inspected, *decision) {
	var body inspected
	if ce := x.r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return policy.Decision{}, body, inspectRefusal(in, http.StatusUnsupportedMediaType, contract.CodeBodyNotInspectable,
			fmt.Sprintf("%s %s on %s is a %s endpoint whose body the proxy must read, and it is sent with Content-Encoding %q; send it uncompressed",
				x.r.Method, x.path, x.t.target, in.Kind(), ce))
	}
	var data []byte
	if x.r.Method != http.MethodGet {
		var err error
		switch data, err = readInspected(x.r); {
		case errors.Is(err, errBodyTooLarge):
			return policy.Decision{}, body, inspectRefusal(in, http.StatusRequestEntityTooLarge, contract.CodeBodyTooLarge,
				fmt.Sprintf("%s %s on %s is a %s endpoint, and the proxy reads at most %d MiB of such a request's body to check it; send a smaller request",
					x.r.Method, x.path, x.t.target, in.Kind(), MaxInspectedBody>>20))
		case err != nil:
			return policy.Decision{}, body, inspectRefusal(in, http.StatusBadRequest, contract.CodeBadFraming,
				fmt.Sprintf("the body of %s %s on %s could not be read whole; resend the request", x.r.Method, x.path, x.t.target))
		}
	}
	var m *policy.Match
	var refusal *decision
	switch in.Kind() {
	case policy.BodyGraphQL:
		m, body, refusal = s.inspectGraphQL(x, in, data)
	case policy.BodyMCP:
		m, body, refusal = s.inspectMCP(x, in, data)
	default:
		refusal = inspectRefusal(in, http.StatusForbidden, contract.CodeOperationNotAllowed, "this request's body cannot be checked")
	}
	x.ev.Fields = body.fields
	if refusal != nil {
		return policy.Decision{}, body, refusal
	}
	return policy.Decision{Allow: true, Reason: policy.ReasonAllowed, Match: m}, body, nil
}

// inspectRefusal is a refusal that lists the operations of the path.
func inspectRefusal(in *policy.Inspection, status int, code contract.Code, msg string) *decision {
	allowed := append([]string{}, in.Allowed()...)
	return &decision{status: status, refusal: errorDetail{Code: code, Message: msg, AllowedOperations: allowed}}
}

// graphQLParams are the parameters a GraphQL server may read from the
// query string of a POST as well (some prefer them to the body's), so a
// POST carrying one is refused.
var graphQLParams = []string{"query", "operationname", "variables", "extensions"}

// inspectGraphQL reads the GraphQL request (the JSON body of a POST, an
// application/graphql body, or a GET's query string) and picks the
// operation that allows it.
func (s *Server) inspectGraphQL(x *exchange, in *policy.Inspection, data []byte) (*policy.Match, inspected, *decision) {
	var body inspected
	r := x.r
	refuse := func(msg string) (*policy.Match, inspected, *decision) {
		return nil, body, inspectRefusal(in, http.StatusForbidden, contract.CodeGraphQLNotAllowed, msg)
	}
	var reqs []policy.GraphQLRequest
	var batch bool
	var err error
	if r.Method == http.MethodGet {
		if r.ContentLength != 0 {
			return refuse("a GraphQL GET must not carry a body; send the query in ?query=")
		}
		var one policy.GraphQLRequest
		if one, err = policy.ParseGraphQLQuery(r.URL.RawQuery); err == nil {
			reqs = []policy.GraphQLRequest{one}
		}
	} else {
		for k := range r.URL.Query() {
			for _, p := range graphQLParams {
				if strings.EqualFold(k, p) {
					return refuse(fmt.Sprintf("a GraphQL POST carries %q in its URL, which a server may read instead of the body; send the request in the body only", k))
				}
			}
		}
		mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if mt == "application/graphql" {
			reqs = []policy.GraphQLRequest{{Query: string(data)}}
		} else {
			reqs, batch, err = policy.ParseGraphQLBody(data)
		}
	}
	if err != nil {
		return refuse(in.RefuseGraphQL(err).Error())
	}
	gd, err := in.DecideGraphQL(reqs, batch)
	body.fields = graphQLAuditFields(gd.Selections)
	if err != nil {
		return refuse(err.Error())
	}
	body.approval = gd.Approval
	return gd.Match, body, nil
}

// Audit field names of a GraphQL request.
const (
	auditGraphQLType      = "graphql.type"
	auditGraphQLOperation = "graphql.operation"
	auditGraphQLFields    = "graphql.fields"
	auditGraphQLHash      = "graphql.persisted_hash"
)

// graphQLAuditFields records what the request executes: operation types,
// names and top-level field names, batch elements separated by ";";
// never variables or arguments.
func graphQLAuditFields(sels []policy.GraphQLSelection) map[string]string {
	if len(sels) == 0 {
		return nil
	}
	var types, names, fields, hashes []string
	for _, sel := range sels {
		types = append(types, sel.Type.String())
		names = append(names, sel.Name)
		fields = append(fields, strings.Join(sel.Fields, ","))
		hashes = append(hashes, sel.PersistedHash)
	}
	out := map[string]string{
		auditGraphQLType:      strings.Join(types, ";"),
		auditGraphQLOperation: strings.Join(names, ";"),
		auditGraphQLFields:    strings.Join(fields, ";"),
	}
	if h := strings.Join(hashes, ""); h != "" {
		out[auditGraphQLHash] = strings.Join(hashes, ";")
	}
	return out
}

// mergeFields adds extra to the audit fields of x.
func mergeFields(x *exchange, extra map[string]string) {
	if len(extra) == 0 {
		return
	}
	if x.ev.Fields == nil {
		x.ev.Fields = make(map[string]string, len(extra))
	}
	for k, v := range extra {
		x.ev.Fields[k] = v
	}
}

// Package policy owns the aileron.connector.v1 spec: its types, parsing and
// validation, the content-addressed store of installed specs, and the compiled
// matcher that decides whether a request is one of a session's operations.
//
// The package is pure: no network, no logging globals, no servers.
package policy

// SchemaVersion is the only schema_version this package accepts.
const SchemaVersion = "aileron.connector.v1"

// SpecFileName is the name of the spec file inside a connector package.
const SpecFileName = "aileron.connector.v1.json"

// Spec is a parsed aileron.connector.v1 document. After ParseSpec succeeds,
// every field holds its normalized value (upper-case methods, lower-case hosts,
// default input types filled in).
type Spec struct {
	SchemaVersion string        `json:"schema_version"`
	Connector     ConnectorMeta `json:"connector"`
	Tools         []Tool        `json:"tools"`
}

// ConnectorMeta identifies a connector package.
type ConnectorMeta struct {
	// FQN is <scheme>://<owner>/<repo>[/<subpath>...], e.g.
	// github://acme/aileron-connector-google.
	FQN string `json:"fqn"`
	// Version is a semantic version without a leading "v"; empty means unversioned.
	Version     string `json:"version,omitempty"`
	Description string `json:"description,omitempty"`
}

// Tool is one command exposed to the sandbox; it groups operations.
type Tool struct {
	Name        string      `json:"name"`
	Description string      `json:"description,omitempty"`
	Operations  []Operation `json:"operations"`
}

// Operation is one upstream HTTP call the connector allows.
type Operation struct {
	Name        string `json:"name"`
	Summary     string `json:"summary,omitempty"`
	Description string `json:"description,omitempty"`
	// Method is upper case after parsing; empty means not proxyable.
	Method string `json:"method,omitempty"`
	// Path starts with "/" and may hold whole-segment {name} templates.
	Path string `json:"path,omitempty"`
	// Hosts are lower-case host[:port]; no port means 443.
	Hosts       []string       `json:"hosts,omitempty"`
	Idempotency Idempotency    `json:"idempotency,omitempty"`
	Approval    Approval       `json:"approval,omitempty"`
	Credential  CredentialKind `json:"credential,omitempty"`
	// WebSocket allows the request to be a WebSocket handshake (HTTP/1.1
	// Upgrade or HTTP/2 extended CONNECT), which the proxy then relays; false
	// (the default) refuses handshakes. Only with method GET.
	WebSocket bool         `json:"websocket,omitempty"`
	Inputs    []Input      `json:"inputs,omitempty"`
	Audit     []AuditField `json:"audit,omitempty"`
	// ApprovalPreview says what a person sees of a held call; nil shows
	// the request's fields in their own order and fetches nothing.
	ApprovalPreview *ApprovalPreview `json:"approval_preview,omitempty"`
	// GraphQL, when set, makes the operation one GraphQL operation shape on
	// its path: the proxy parses each request body and allows it only when
	// the executed operation is of this type and selects only these
	// top-level fields (bodyrule.go). nil inspects nothing.
	GraphQL *GraphQLRule `json:"graphql,omitempty"`
	// MCP, when set, makes the operation a Streamable HTTP MCP endpoint
	// whose JSON-RPC tool calls the proxy checks (bodyrule.go). nil
	// inspects nothing.
	MCP *MCPRule `json:"mcp,omitempty"`
}

// IsProxyable reports whether the operation declares a method, a path and at
// least one host, which the proxy needs to match it.
func (o *Operation) IsProxyable() bool {
	return o.Method != "" && o.Path != "" && len(o.Hosts) > 0
}

// Input is one named argument of an operation.
type Input struct {
	Name string `json:"name"`
	// Type defaults to InputString when the spec leaves it empty.
	Type        InputType `json:"type,omitempty"`
	Required    bool      `json:"required,omitempty"`
	Description string    `json:"description,omitempty"`
}

// AuditField names a value recorded in the audit event of an operation.
type AuditField struct {
	Name string `json:"name"`
	// Source is args.<input>, path.<template name> or query.<name>.
	Source string `json:"source"`
	// Redact records "sha256:" plus 12 hex characters instead of the value.
	Redact      bool   `json:"redact,omitempty"`
	Description string `json:"description,omitempty"`
}

// Idempotency says whether an operation may be retried.
type Idempotency string

// Idempotency values. The empty value is treated as not idempotent.
const (
	IdempotencyUnspecified Idempotency = ""
	Idempotent             Idempotency = "idempotent"
	NotIdempotent          Idempotency = "not_idempotent"
)

// String returns the spec spelling, "unspecified" for the zero value.
func (i Idempotency) String() string {
	if i == "" {
		return "unspecified"
	}
	return string(i)
}

// IsRetryable reports whether the operation is declared idempotent; the zero
// value is not.
func (i Idempotency) IsRetryable() bool { return i == Idempotent }

// Approval says whether a person must approve each call.
type Approval string

// Approval values. The empty value means none.
const (
	ApprovalUnspecified Approval = ""
	ApprovalNone        Approval = "none"
	ApprovalRequired    Approval = "required"
)

// String returns the spec spelling, "none" for the zero value.
func (a Approval) String() string {
	if a == "" {
		return string(ApprovalNone)
	}
	return string(a)
}

// IsRequired reports whether calls must be approved.
func (a Approval) IsRequired() bool { return a == ApprovalRequired }

// CredentialKind names the credential the proxy injects for an operation.
type CredentialKind string

// Credential kinds. The empty value means none.
const (
	CredentialUnspecified CredentialKind = ""
	CredentialNone        CredentialKind = "none"
	CredentialOAuth2      CredentialKind = "oauth2"
	CredentialAPIKey      CredentialKind = "api_key"
	CredentialBearer      CredentialKind = "bearer"
	CredentialBasic       CredentialKind = "basic"
	// CredentialAWSSigV4 re-signs the request with AWS Signature Version 4.
	CredentialAWSSigV4 CredentialKind = "aws_sigv4"
)

// String returns the spec spelling, "none" for the zero value.
func (c CredentialKind) String() string {
	if c == "" {
		return string(CredentialNone)
	}
	return string(c)
}

// HasCredential reports whether the operation needs an injected credential.
func (c CredentialKind) HasCredential() bool {
	return c != CredentialUnspecified && c != CredentialNone
}

// InputType is the JSON type of an input.
type InputType string

// Input types.
const (
	InputString  InputType = "string"
	InputInteger InputType = "integer"
	InputNumber  InputType = "number"
	InputBoolean InputType = "boolean"
	InputArray   InputType = "array"
	InputObject  InputType = "object"
)

// String returns the spec spelling.
func (t InputType) String() string { return string(t) }

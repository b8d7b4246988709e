package policy

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// specDoc returns a valid spec whose only tool has the given operations
// (JSON objects, comma separated).
func specDoc(ops string) string {
	return `{"schema_version": "aileron.connector.v1",
  "connector": {"fqn": "github://acme/example", "version": "1.0.0"},
  "tools": [{"name": "ex", "operations": [` + ops + `]}]}`
}

// specTools returns a valid document with the given tools array content.
func specTools(tools string) string {
	return `{"schema_version": "aileron.connector.v1",
  "connector": {"fqn": "github://acme/example"},
  "tools": [` + tools + `]}`
}

// specConnector returns a valid document with the given connector object.
func specConnector(conn string) string {
	return `{"schema_version": "aileron.connector.v1", "connector": ` + conn + `,
  "tools": [{"name": "ex", "operations": [{"name": "op"}]}]}`
}

// opWith returns an operation object: a valid GET /items/{id} plus extra
// fields (a JSON fragment starting with a comma) or overrides.
func opWith(fields string) string {
	return `{"name": "op", "method": "GET", "path": "/items/{id}", "hosts": ["api.example.com"],
   "inputs": [{"name": "id", "required": true}]` + fields + `}`
}

// opPath is a valid operation with the given path and inputs a, b and id.
func opPath(path string) string {
	return `{"name": "op", "method": "GET", "path": ` + quoteJSON(path) + `, "hosts": ["api.example.com"],
   "inputs": [{"name": "a"}, {"name": "b"}, {"name": "id"}]}`
}

// opHost is a valid operation with the given single host entry (raw JSON).
func opHost(hostJSON string) string {
	return `{"name": "op", "method": "GET", "path": "/x", "hosts": [` + hostJSON + `]}`
}

func quoteJSON(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte("0123456789abcdef"[r>>4])
			b.WriteByte("0123456789abcdef"[r&15])
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// TestValidationRules has one failing case per validation rule; each spec
// has exactly one problem, and the test checks its location and message.
func TestValidationRules(t *testing.T) {
	tests := []struct {
		name, doc, path, msg string
	}{
		// document and schema_version
		{"document not an object", `[1]`, "", "the spec must be a JSON object, got array"},
		{"schema_version missing", `{"connector": {"fqn": "github://a/b"}, "tools": [{"name": "x", "operations": [{"name": "o"}]}]}`,
			"schema_version", `required; set it to "aileron.connector.v1"`},
		{"schema_version wrong", strings.Replace(specDoc(opWith("")), `"aileron.connector.v1"`, `"aileron.connector.v2"`, 1),
			"schema_version", `"aileron.connector.v2" is not supported; set it to "aileron.connector.v1"`},
		{"schema_version type", strings.Replace(specDoc(opWith("")), `"aileron.connector.v1"`, `1`, 1),
			"schema_version", "must be a string, got number"},
		{"duplicate key", strings.Replace(specDoc(opWith("")), `"schema_version": "aileron.connector.v1",`, `"schema_version": "aileron.connector.v1", "schema_version": "aileron.connector.v1",`, 1),
			"schema_version", `duplicate key "schema_version"; JSON readers disagree on which value wins`},

		// connector
		{"connector missing", `{"schema_version": "aileron.connector.v1", "tools": [{"name": "x", "operations": [{"name": "o"}]}]}`,
			"connector.fqn", `required; set it to the connector's name, e.g. "github://acme/aileron-connector-google"`},
		{"connector type", specConnector(`"github://a/b"`), "connector", "must be an object, got string"},
		{"fqn type", specConnector(`{"fqn": 7}`), "connector.fqn", "must be a string, got number"},
		{"fqn no scheme", specConnector(`{"fqn": "acme/repo"}`), "connector.fqn", `"acme/repo" must be <scheme>://<owner>/<repo>[/<subpath>...]`},
		{"fqn bad scheme", specConnector(`{"fqn": "https://acme/repo"}`), "connector.fqn", `scheme "https" is not supported; use github, gitlab, hub or local (e.g. "github://acme/repo")`},
		{"fqn version", specConnector(`{"fqn": "github://acme/repo@v1.2.3"}`), "connector.fqn", `"github://acme/repo@v1.2.3" must not carry a version; remove "@v1.2.3" and set connector.version to "1.2.3"`},
		{"fqn no repo", specConnector(`{"fqn": "github://acme"}`), "connector.fqn", `"github://acme" must name an owner and a repository`},
		{"fqn empty owner", specConnector(`{"fqn": "github:///repo"}`), "connector.fqn", `must name an owner and a repository`},
		{"fqn owner chars", specConnector(`{"fqn": "github://ac+me/repo"}`), "connector.fqn", `owner "ac+me" may only contain letters, digits, '.', '_' and '-'`},
		{"fqn repo chars", specConnector(`{"fqn": "github://acme/re po"}`), "connector.fqn", `must not contain whitespace`},
		{"fqn repo chars 2", specConnector(`{"fqn": "github://acme/re:po"}`), "connector.fqn", `repository "re:po" may only contain letters, digits, '.', '_' and '-'`},
		{"fqn dot segment", specConnector(`{"fqn": "github://acme/.."}`), "connector.fqn", `repository ".." is not allowed; use a real name`},
		{"fqn empty subpath", specConnector(`{"fqn": "github://acme/repo/"}`), "connector.fqn", `"github://acme/repo/" has an empty subpath segment; remove the extra "/"`},
		{"fqn subpath chars", specConnector(`{"fqn": "local://acme/repo/a*b"}`), "connector.fqn", `subpath segment "a*b" may only contain`},
		{"fqn query", specConnector(`{"fqn": "github://acme/repo?x=1"}`), "connector.fqn", `must not contain a query or fragment`},
		{"version leading v", specConnector(`{"fqn": "github://a/b", "version": "v1.2.3"}`), "connector.version", `"v1.2.3" must be a semantic version without a leading "v"; use "1.2.3"`},
		{"version two parts", specConnector(`{"fqn": "github://a/b", "version": "1.2"}`), "connector.version", `"1.2" must be a semantic version MAJOR.MINOR.PATCH[-prerelease][+build]`},
		{"version leading zero", specConnector(`{"fqn": "github://a/b", "version": "01.2.3"}`), "connector.version", `"01.2.3" must be a semantic version`},
		{"version prerelease zero", specConnector(`{"fqn": "github://a/b", "version": "1.2.3-01"}`), "connector.version", `"1.2.3-01" must be a semantic version`},

		// tools
		{"tools missing", `{"schema_version": "aileron.connector.v1", "connector": {"fqn": "github://a/b"}}`, "tools", "at least one tool is required"},
		{"tools empty", specTools(``), "tools", "at least one tool is required"},
		{"tools type", strings.Replace(specTools(`{}`), `"tools": [{}]`, `"tools": {}`, 1), "tools", "must be an array, got object"},
		{"tool type", specTools(`"ex"`), "tools[0]", "must be an object, got string"},
		{"tool name missing", specTools(`{"operations": [{"name": "o"}]}`), "tools[0].name", `required; name the tool, e.g. "github"`},
		{"tool name chars", specTools(`{"name": "my tool", "operations": [{"name": "o"}]}`), "tools[0].name", `"my tool" may only contain letters, digits, '.', '_', ':' and '-'`},
		{"tool name long", specTools(`{"name": "` + strings.Repeat("a", 129) + `", "operations": [{"name": "o"}]}`), "tools[0].name", "is longer than 128 characters"},
		{"tool name duplicate", specTools(`{"name": "gh", "operations": [{"name": "o"}]}, {"name": "gh", "operations": [{"name": "o"}]}`),
			"tools[1].name", `duplicate tool name "gh" (tools[0] has it too); tool names must be unique`},
		{"tool command duplicate", specTools(`{"name": "gh", "operations": [{"name": "o"}]}, {"name": "GH", "operations": [{"name": "o"}]}`),
			"tools[1].name", `"GH" gives the command "gh", like the tool at tools[0]; tool names must differ after lower-casing`},
		{"tool command colon", specTools(`{"name": "gh:api", "operations": [{"name": "o"}]}`),
			"tools[0].name", `"gh:api" cannot be a command name: the tool's command "gh:api" must start with a letter or digit and contain only letters, digits, '.', '_' and '-' (no ':'); use e.g. "gh-api"`},
		{"tool command leading dash", specTools(`{"name": "-rf", "operations": [{"name": "o"}]}`),
			"tools[0].name", `"-rf" cannot be a command name`},
		{"tool command leading dot", specTools(`{"name": ".hidden", "operations": [{"name": "o"}]}`),
			"tools[0].name", `".hidden" cannot be a command name`},
		{"operations missing", specTools(`{"name": "ex"}`), "tools[0].operations", "at least one operation is required"},
		{"operations empty", specTools(`{"name": "ex", "operations": []}`), "tools[0].operations", "at least one operation is required"},
		{"operation type", specTools(`{"name": "ex", "operations": [[]]}`), "tools[0].operations[0]", "must be an object, got array"},

		// operation names
		{"operation name missing", specDoc(`{"method": "GET"}`), "tools[0].operations[0].name", `required; name the operation, e.g. "items.list"`},
		{"operation name chars", specDoc(`{"name": "list items"}`), "tools[0].operations[0].name", `"list items" may only contain letters, digits, '.', '_', ':' and '-'`},
		{"operation name duplicate", specDoc(`{"name": "op"}, {"name": "x"}, {"name": "op"}`), "tools[0].operations[2].name",
			`duplicate operation name "op" (tools[0].operations[0] has it too); operation names must be unique within a tool`},
		{"operation summary type", specDoc(opWith(`, "summary": ["x"]`)), "tools[0].operations[0].summary", "must be a string, got array"},

		// method
		{"method unknown", specDoc(`{"name": "op", "method": "FETCH"}`), "tools[0].operations[0].method", `"FETCH" is not supported; use GET, HEAD, POST, PUT, PATCH or DELETE`},
		{"method connect", specDoc(`{"name": "op", "method": "connect"}`), "tools[0].operations[0].method", `"connect" is not supported`},
		{"method type", specDoc(`{"name": "op", "method": true}`), "tools[0].operations[0].method", "must be a string, got boolean"},

		// path
		{"path no slash", specDoc(opPath("items")), "tools[0].operations[0].path", `"items" must start with "/"`},
		{"path query", specDoc(opPath("/items?x=1")), "tools[0].operations[0].path", `"/items?x=1" must not contain a query ("?x=1"); declare query parameters as inputs instead`},
		{"path fragment", specDoc(opPath("/items#top")), "tools[0].operations[0].path", `"/items#top" must not contain a fragment ("#top")`},
		{"path empty segment", specDoc(opPath("/a//b")), "tools[0].operations[0].path", `"/a//b" has an empty segment ("//"); remove the extra "/"`},
		{"path dot dot", specDoc(opPath("/a/../b")), "tools[0].operations[0].path", `"/a/../b" must not contain dot segments`},
		{"path dot", specDoc(opPath("/a/./b")), "tools[0].operations[0].path", `must not contain dot segments`},
		{"path encoded dot dot", specDoc(opPath("/a/%2e%2E/b")), "tools[0].operations[0].path", `must not contain dot segments`},
		{"path dot dot param", specDoc(opPath("/a/..;x/b")), "tools[0].operations[0].path", `must not contain dot segments`},
		{"path encoded slash", specDoc(opPath("/a%2Fb")), "tools[0].operations[0].path", `segment "a%2Fb" of "/a%2Fb" holds a '/' or '\' (raw or percent-encoded); use separate segments`},
		{"path encoded control", specDoc(opPath("/a%00b")), "tools[0].operations[0].path", `segment "a%00b" of "/a%00b" holds a control character`},
		{"path double encoding", specDoc(opPath("/a%252e")), "tools[0].operations[0].path", `is percent-encoded twice`},
		{"path bad escape", specDoc(opPath("/a%zz")), "tools[0].operations[0].path", `segment "a%zz" of "/a%zz" has an invalid percent-encoding`},
		{"path truncated escape", specDoc(opPath("/a%2")), "tools[0].operations[0].path", `has an invalid percent-encoding`},
		{"path space", specDoc(opPath("/a b")), "tools[0].operations[0].path", `"/a b" contains " ", which must be percent-encoded (e.g. "%20")`},
		{"path non-ascii", specDoc(opPath("/café")), "tools[0].operations[0].path", `contains "é", which must be percent-encoded (e.g. "%C3%A9")`},
		// Percent-encoding a backslash does not help (%5C is refused too), so
		// the message no longer suggests it.
		{"path backslash", specDoc(opPath(`/a\b`)), "tools[0].operations[0].path", `holds a '/' or '\' (raw or percent-encoded); use separate segments or a {template}`},
		{"path template mixed", specDoc(opPath("/items/x{id}")), "tools[0].operations[0].path", `segment "x{id}" of "/items/x{id}" mixes a template with other text; a template must be a whole segment like "/{id}"`},
		{"path template suffix", specDoc(opPath("/items/{id}.json")), "tools[0].operations[0].path", `mixes a template with other text`},
		{"path template unclosed", specDoc(opPath("/items/{id")), "tools[0].operations[0].path", `mixes a template with other text`},
		{"path template nested", specDoc(opPath("/items/{{id}}")), "tools[0].operations[0].path", `mixes a template with other text`},
		{"websocket not bool", specDoc(opWith(`, "websocket": "yes"`)), "tools[0].operations[0].websocket", `must be true or false, got string`},
		{"websocket with post", specDoc(`{"name": "op", "method": "POST", "path": "/ws", "hosts": ["api.example.com"], "websocket": true}`),
			"tools[0].operations[0].websocket", `a WebSocket handshake is a GET, but the method is "POST"; use "method": "GET" or drop "websocket"`},
		{"custom method empty", specDoc(opPath("/items/{id}:")), "tools[0].operations[0].path",
			`custom method ":" of segment "{id}:" of "/items/{id}:" must start with a letter and use only letters, digits, '.', '_' and '-'`},
		{"custom method digit", specDoc(opPath("/items/{id}:1x")), "tools[0].operations[0].path", `custom method ":1x" of segment "{id}:1x"`},
		{"custom method encoded", specDoc(opPath("/items/{id}:a%20b")), "tools[0].operations[0].path", `custom method ":a%20b" of segment`},
		{"custom method colon", specDoc(opPath("/items/{id}:a:b")), "tools[0].operations[0].path", `custom method ":a:b" of segment`},
		{"custom method two templates", specDoc(opPath("/items/{a}:{b}")), "tools[0].operations[0].path", `segment "{a}:{b}" of "/items/{a}:{b}" mixes a template with other text; a template must be a whole segment like "/{id}", or be followed by a custom method like "/{model}:generateContent"`},
		{"custom method before template", specDoc(opPath("/items/a:{id}")), "tools[0].operations[0].path", `mixes a template with other text`},
		{"custom method template undeclared", specDoc(opPath("/models/{model}:generate")), "tools[0].operations[0].path",
			`template {model} is not a declared input; add {"name": "model", "required": true} to inputs`},
		{"custom method template empty", specDoc(opPath("/items/{}:get")), "tools[0].operations[0].path", `template "{}:get" of "/items/{}:get" must be {name}`},
		{"path template empty", specDoc(opPath("/items/{}")), "tools[0].operations[0].path", `template "{}" of "/items/{}" must be {name}`},
		{"path template name chars", specDoc(opPath("/items/{a b}")), "tools[0].operations[0].path", `template "{a b}" of "/items/{a b}" must be {name}`},
		{"path template twice", specDoc(opPath("/items/{id}/{id}")), "tools[0].operations[0].path", `template {id} appears more than once in "/items/{id}/{id}"`},
		{"path template undeclared", specDoc(opPath("/items/{owner}")), "tools[0].operations[0].path",
			`template {owner} is not a declared input; add {"name": "owner", "required": true} to inputs`},

		// hosts
		{"host scheme and path", specDoc(opHost(`"https://api.example.com/path"`)), "tools[0].operations[0].hosts[0]", `"https://api.example.com/path" must be host[:port] without a scheme or path`},
		{"host path", specDoc(opHost(`"api.example.com/v1"`)), "tools[0].operations[0].hosts[0]", `"api.example.com/v1" must be host[:port] without a scheme or path`},
		{"host userinfo", specDoc(opHost(`"user:pw@api.example.com"`)), "tools[0].operations[0].hosts[0]", `"user:pw@api.example.com" must not contain userinfo ("user:pw@")`},
		{"host query", specDoc(opHost(`"api.example.com?x"`)), "tools[0].operations[0].hosts[0]", `must not contain a query ("?")`},
		{"host fragment", specDoc(opHost(`"api.example.com#x"`)), "tools[0].operations[0].hosts[0]", `must not contain a fragment ("#")`},
		{"host whitespace", specDoc(opHost(`" api.example.com"`)), "tools[0].operations[0].hosts[0]", `must not contain whitespace or control characters`},
		{"host empty", specDoc(opHost(`""`)), "tools[0].operations[0].hosts[0]", `must not be empty; use host[:port]`},
		{"host type", specDoc(opHost(`443`)), "tools[0].operations[0].hosts[0]", `must be a string like "api.example.com", got number`},
		{"hosts type", specDoc(`{"name": "op", "hosts": "api.example.com"}`), "tools[0].operations[0].hosts", `must be an array, got string`},
		{"host port range", specDoc(opHost(`"api.example.com:70000"`)), "tools[0].operations[0].hosts[0]", `"api.example.com:70000": port 70000 is out of range; use 1-65535`},
		{"host port zero", specDoc(opHost(`"api.example.com:0"`)), "tools[0].operations[0].hosts[0]", `port 0 is out of range`},
		{"host port empty", specDoc(opHost(`"api.example.com:"`)), "tools[0].operations[0].hosts[0]", `"api.example.com:" has an empty port`},
		{"host port leading zero", specDoc(opHost(`"api.example.com:0443"`)), "tools[0].operations[0].hosts[0]", `port "0443" must be a decimal number 1-65535 without leading zeros`},
		{"host port letters", specDoc(opHost(`"api.example.com:https"`)), "tools[0].operations[0].hosts[0]", `port "https" must be a decimal number`},
		{"host ipv6 unbracketed", specDoc(opHost(`"2001:db8::1"`)), "tools[0].operations[0].hosts[0]", `IPv6 literals must be in brackets`},
		{"host ipv6 bad", specDoc(opHost(`"[2001:db8::zz]:443"`)), "tools[0].operations[0].hosts[0]", `"[2001:db8::zz]" is not a valid IPv6 address`},
		{"host ipv6 zone", specDoc(opHost(`"[fe80::1%25eth0]"`)), "tools[0].operations[0].hosts[0]", `is not a valid IPv6 address (zones are not allowed)`},
		{"host ipv6 ipv4 in brackets", specDoc(opHost(`"[127.0.0.1]"`)), "tools[0].operations[0].hosts[0]", `is not a valid IPv6 address`},
		{"host ipv6 unclosed", specDoc(opHost(`"[::1"`)), "tools[0].operations[0].hosts[0]", `has an unclosed "["`},
		{"host ipv6 junk", specDoc(opHost(`"[::1]x"`)), "tools[0].operations[0].hosts[0]", `has "x" after the IPv6 literal`},
		{"host wildcard", specDoc(opHost(`"*.example.com"`)), "tools[0].operations[0].hosts[0]", `wildcards are not supported; list each host`},
		{"host bad idn", specDoc(opHost(`"a\u200db.example"`)), "tools[0].operations[0].hosts[0]", `is not a valid internationalised name`},
		{"host empty label", specDoc(opHost(`"api..example.com"`)), "tools[0].operations[0].hosts[0]", `has an empty label`},
		{"host label too long", specDoc(opHost(`"` + strings.Repeat("a", 64) + `.com"`)), "tools[0].operations[0].hosts[0]", `is longer than 63 characters`},
		{"host name too long", specDoc(opHost(`"` + strings.Repeat("abcdefghi.", 26) + `com"`)), "tools[0].operations[0].hosts[0]", `the limit is 253`},
		{"host label hyphen", specDoc(opHost(`"-api.example.com"`)), "tools[0].operations[0].hosts[0]", `label "-api" must not start or end with '-'`},
		{"host bad character", specDoc(opHost(`"my!api.example.com"`)), "tools[0].operations[0].hosts[0]", `label "my!api" may only contain letters, digits, '-' and '_'`},
		{"host numeric", specDoc(opHost(`"1.2.3"`)), "tools[0].operations[0].hosts[0]", `is neither a valid IPv4 address nor a DNS name`},
		{"host ipv4 leading zero", specDoc(opHost(`"01.2.3.4"`)), "tools[0].operations[0].hosts[0]", `is neither a valid IPv4 address nor a DNS name`},
		{"host brackets", specDoc(opHost(`"api]"`)), "tools[0].operations[0].hosts[0]", `brackets are only allowed around a whole IPv6 literal`},

		// enums
		{"idempotency", specDoc(opWith(`, "idempotency": "safe"`)), "tools[0].operations[0].idempotency", `"safe" is not valid; use "idempotent" or "not_idempotent", or leave it out`},
		{"approval", specDoc(opWith(`, "approval": "always"`)), "tools[0].operations[0].approval", `"always" is not valid; use "none" or "required", or leave it out`},
		{"approval case", specDoc(opWith(`, "approval": "Required"`)), "tools[0].operations[0].approval", `"Required" is not valid`},
		{"credential", specDoc(opWith(`, "credential": "token"`)), "tools[0].operations[0].credential", `"token" is not valid; use "none", "oauth2", "api_key", "bearer", "basic" or "aws_sigv4", or leave it out`},

		// inputs
		{"inputs type", specDoc(`{"name": "op", "inputs": {}}`), "tools[0].operations[0].inputs", `must be an array, got object`},
		{"input type", specDoc(`{"name": "op", "inputs": ["id"]}`), "tools[0].operations[0].inputs[0]", `must be an object, got string`},
		{"input name missing", specDoc(`{"name": "op", "inputs": [{"type": "string"}]}`), "tools[0].operations[0].inputs[0].name", `required; name the input, e.g. "id"`},
		{"input name chars", specDoc(`{"name": "op", "inputs": [{"name": "a/b"}]}`), "tools[0].operations[0].inputs[0].name", `"a/b" may only contain letters, digits, '.', '_', ':' and '-'`},
		{"input name duplicate", specDoc(`{"name": "op", "inputs": [{"name": "a"}, {"name": "a"}]}`), "tools[0].operations[0].inputs[1].name",
			`duplicate input name "a" (tools[0].operations[0].inputs[0] has it too); input names must be unique within an operation`},
		{"input type unknown", specDoc(`{"name": "op", "inputs": [{"name": "a", "type": "int"}]}`), "tools[0].operations[0].inputs[0].type",
			`"int" is not a valid input type; use string, integer, number, boolean, array or object (default string)`},
		{"input required type", specDoc(`{"name": "op", "inputs": [{"name": "a", "required": "yes"}]}`), "tools[0].operations[0].inputs[0].required",
			`must be true or false, got string`},

		// audit
		{"audit type", specDoc(`{"name": "op", "audit": [1]}`), "tools[0].operations[0].audit[0]", `must be an object, got number`},
		{"audit name missing", specDoc(opWith(`, "audit": [{"source": "args.id"}]`)), "tools[0].operations[0].audit[0].name", `required; name the audit field, e.g. "repository"`},
		{"audit name chars", specDoc(opWith(`, "audit": [{"name": "item id", "source": "args.id"}]`)), "tools[0].operations[0].audit[0].name", `"item id" may only contain`},
		{"audit name duplicate", specDoc(opWith(`, "audit": [{"name": "x", "source": "args.id"}, {"name": "x", "source": "path.id"}]`)), "tools[0].operations[0].audit[1].name",
			`duplicate audit field name "x" (tools[0].operations[0].audit[0] has it too); audit field names must be unique within an operation`},
		{"audit source missing", specDoc(opWith(`, "audit": [{"name": "x"}]`)), "tools[0].operations[0].audit[0].source", `required; use args.<input>, path.<template name> or query.<name>`},
		{"audit source kind", specDoc(opWith(`, "audit": [{"name": "x", "source": "body.id"}]`)), "tools[0].operations[0].audit[0].source", `"body.id" must be args.<input>, path.<template name> or query.<name>`},
		{"audit source no dot", specDoc(opWith(`, "audit": [{"name": "x", "source": "id"}]`)), "tools[0].operations[0].audit[0].source", `"id" must be args.<input>`},
		{"audit source empty name", specDoc(opWith(`, "audit": [{"name": "x", "source": "query."}]`)), "tools[0].operations[0].audit[0].source", `"query." needs a name after "query." using letters, digits, '.', '_', ':' and '-', e.g. "query.id"`},
		{"audit source query chars", specDoc(opWith(`, "audit": [{"name": "x", "source": "query.a=b"}]`)), "tools[0].operations[0].audit[0].source", `"query.a=b" needs a query parameter name after "query." using letters, digits, '.', '_', ':', '-', '[' and ']', e.g. "query.page"`},
		{"audit args name chars", specDoc(opWith(`, "audit": [{"name": "x", "source": "args.a[0]"}]`)), "tools[0].operations[0].audit[0].source", `"args.a[0]" needs a name after "args."`},
		{"audit args unknown", specDoc(opWith(`, "audit": [{"name": "x", "source": "args.q"}]`)), "tools[0].operations[0].audit[0].source",
			`"args.q" refers to input "q", which the operation does not declare; add it to inputs or use one of: id`},
		{"audit args no inputs", specDoc(`{"name": "op", "audit": [{"name": "x", "source": "args.q"}]}`), "tools[0].operations[0].audit[0].source",
			`add it to inputs or use one of: (the operation declares no inputs)`},
		{"audit path unknown", specDoc(opWith(`, "audit": [{"name": "x", "source": "path.owner"}]`)), "tools[0].operations[0].audit[0].source",
			`"path.owner" refers to template {owner}, which path "/items/{id}" does not have`},
		{"audit path no path", specDoc(`{"name": "op", "audit": [{"name": "x", "source": "path.id"}]}`), "tools[0].operations[0].audit[0].source",
			`"path.id" refers to a path template, but the operation has no path`},
		{"audit redact type", specDoc(opWith(`, "audit": [{"name": "x", "source": "args.id", "redact": 1}]`)), "tools[0].operations[0].audit[0].redact",
			`must be true or false, got number`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec, _, err := ParseSpec([]byte(tc.doc))
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("ParseSpec() error = %v (spec %v), want a *ValidationError", err, spec != nil)
			}
			if spec != nil {
				t.Errorf("ParseSpec() spec = %+v, want nil with an error", spec)
			}
			if len(ve.Problems) != 1 {
				t.Fatalf("ParseSpec() problems = %d, want 1:\n%s", len(ve.Problems), ve.Error())
			}
			p := ve.Problems[0]
			if p.Path != tc.path {
				t.Errorf("problem path = %q, want %q (%s)", p.Path, tc.path, p)
			}
			if !strings.Contains(p.Message, tc.msg) {
				t.Errorf("problem message = %q, want it to contain %q", p.Message, tc.msg)
			}
		})
	}
}

// TestValidSpecs checks the edge cases that are valid, and that the base
// documents of TestValidationRules are valid.
func TestValidSpecs(t *testing.T) {
	docs := []struct{ name, doc string }{
		{"base op", specDoc(opWith(""))},
		{"base path op", specDoc(opPath("/a/{a}/b/{b}"))},
		{"bare op", specDoc(`{"name": "op"}`)},
		{"root path", specDoc(opPath("/"))},
		{"trailing slash", specDoc(opPath("/items/"))},
		{"pchar path", specDoc(opPath("/a:b@c/~x_y-z.json/$&'()*+,;=/%20%C3%A9"))},
		{"dots in segment", specDoc(opPath("/v1.2/..x/.well-known"))},
		{"websocket", specDoc(opWith(`, "websocket": true`))},
		{"websocket false with post", specDoc(`{"name": "op", "method": "POST", "path": "/ws", "hosts": ["api.example.com"], "websocket": false}`)},
		{"custom method", specDoc(opPath("/v1beta/models/{id}:streamGenerateContent"))},
		{"custom method not last", specDoc(opPath("/v1/{a}:batch.Get-x_y/{b}:z"))},
		{"custom method literal", specDoc(opPath("/v1/models/pro:generate"))},
		{"ipv4 host", specDoc(opHost(`"127.0.0.1:8443"`))},
		{"ipv6 host", specDoc(opHost(`"[::1]:8443"`))},
		{"ipv6 no port", specDoc(opHost(`"[2001:DB8::1]"`))},
		{"trailing dot host", specDoc(opHost(`"api.example.com."`))},
		{"single label host", specDoc(opHost(`"localhost"`))},
		{"max port", specDoc(opHost(`"h.example:65535"`))},
		{"all enums", specDoc(opWith(`, "idempotency": "not_idempotent", "approval": "required", "credential": "api_key"`))},
		{"empty enums", specDoc(opWith(`, "idempotency": "", "approval": "", "credential": ""`))},
		{"all input types", specDoc(`{"name": "op", "inputs": [{"name": "a", "type": "string"}, {"name": "b", "type": "integer"},
			{"name": "c", "type": "number"}, {"name": "d", "type": "boolean"}, {"name": "e", "type": "array"}, {"name": "f", "type": "object"}]}`)},
		{"all audit sources", specDoc(opWith(`, "audit": [{"name": "a", "source": "args.id", "redact": true}, {"name": "b", "source": "path.id"}, {"name": "c", "source": "query.page[size]x"}]`))},
		{"names with colon", specDoc(`{"name": "repo:read", "inputs": [{"name": "x:y"}], "audit": [{"name": "a:b", "source": "args.x:y"}]}`)},
		{"nulls are absent", specDoc(`{"name": "op", "summary": null, "method": null, "hosts": null, "inputs": null}`)},
		{"unversioned", specConnector(`{"fqn": "local://aileron/demo"}`)},
		{"semver prerelease build", specConnector(`{"fqn": "hub://a/b/c/d", "version": "1.0.0-rc.1+build.5"}`)},
		{"gitlab subgroups", specConnector(`{"fqn": "gitlab://group/sub/project"}`)},
		{"tool command with dots", specTools(`{"name": "Gh.API_v2", "operations": [{"name": "o"}]}`)},
		{"two tools", specTools(`{"name": "a", "operations": [{"name": "o"}]}, {"name": "b", "operations": [{"name": "o"}]}`)},
	}
	for _, tc := range docs {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := ParseSpec([]byte(tc.doc)); err != nil {
				t.Fatalf("ParseSpec() error:\n%v", err)
			}
		})
	}
}

func TestWarnings(t *testing.T) {
	tests := []struct {
		name, doc string
		want      []Problem
	}{
		{"unknown top-level field", strings.Replace(specDoc(opWith("")), `{"schema_version"`, `{"$schema": "x", "schema_version"`, 1),
			[]Problem{{Path: `["$schema"]`, Message: `unknown field "$schema" is ignored`}}},
		{"unknown op field with suggestion", specDoc(opWith(`, "Method": "GET", "host": ["x"]`)),
			[]Problem{
				{Path: "tools[0].operations[0].Method", Message: `unknown field "Method" is ignored; did you mean "method"?`},
				{Path: "tools[0].operations[0].host", Message: `unknown field "host" is ignored; did you mean "hosts"?`},
			}},
		{"unknown connector, tool, input and audit fields", `{"schema_version": "aileron.connector.v1",
			"connector": {"fqn": "github://a/b", "homepage": "x"},
			"tools": [{"name": "t", "tags": [], "operations": [{"name": "o", "inputs": [{"name": "i", "default": 1}],
			"audit": [{"name": "a", "source": "args.i", "redacted": true}]}]}]}`,
			[]Problem{
				{Path: "connector.homepage", Message: `unknown field "homepage" is ignored`},
				{Path: "tools[0].tags", Message: `unknown field "tags" is ignored`},
				{Path: "tools[0].operations[0]", Message: "not proxyable: it declares no method, path or hosts; the proxy refuses its calls until it declares method, path and hosts"},
				{Path: "tools[0].operations[0].inputs[0].default", Message: `unknown field "default" is ignored`},
				{Path: "tools[0].operations[0].audit[0].redacted", Message: `unknown field "redacted" is ignored; did you mean "redact"?`},
			}},
		{"not proxyable without hosts", specDoc(`{"name": "op", "method": "GET", "path": "/x", "hosts": []}`),
			[]Problem{{Path: "tools[0].operations[0]", Message: "not proxyable: it declares no hosts; the proxy refuses its calls until it declares method, path and hosts"}}},
		{"not proxyable without method and path", specDoc(`{"name": "op", "hosts": ["a.example"]}`),
			[]Problem{{Path: "tools[0].operations[0]", Message: "not proxyable: it declares no method or path; the proxy refuses its calls until it declares method, path and hosts"}}},
		{"duplicate host", specDoc(`{"name": "op", "method": "GET", "path": "/x", "hosts": ["a.example", "A.EXAMPLE:443"]}`),
			[]Problem{{Path: "tools[0].operations[0].hosts[1]", Message: `duplicate host "A.EXAMPLE:443" (same as tools[0].operations[0].hosts[0]); it is ignored`}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec, warnings, err := ParseSpec([]byte(tc.doc))
			if err != nil {
				t.Fatalf("ParseSpec() error: %v", err)
			}
			if spec == nil {
				t.Fatal("ParseSpec() spec = nil")
			}
			if strings.Join(problemStrings(warnings), "\n") != strings.Join(problemStrings(tc.want), "\n") {
				t.Errorf("warnings =\n%s\nwant\n%s", strings.Join(problemStrings(warnings), "\n"), strings.Join(problemStrings(tc.want), "\n"))
			}
		})
	}
}

func problemStrings(ps []Problem) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

// TestWarningsWithErrors checks warnings are returned with a failing spec.
func TestWarningsWithErrors(t *testing.T) {
	_, warnings, err := ParseSpec([]byte(specDoc(`{"name": "op", "colour": 1, "method": "FETCH"}`)))
	if err == nil {
		t.Fatal("ParseSpec() error = nil, want the FETCH problem")
	}
	if len(warnings) == 0 || warnings[0].Path != "tools[0].operations[0].colour" {
		t.Errorf("warnings = %v, want the unknown field colour first", warnings)
	}
}

// TestHostNormalForm checks validation stores hosts in the one normal form
// (internal/hostport): internationalised names in punycode, underscores
// kept, IPv4-mapped IPv6 unmapped. Before the grammar was unified policy
// refused the first two while ca and the passthrough globs accepted them.
func TestHostNormalForm(t *testing.T) {
	spec, _, err := ParseSpec([]byte(specDoc(opHost(`"Bücher.example", "my_api.example.com:8443", "[::ffff:10.0.0.1]"`))))
	if err != nil {
		t.Fatalf("ParseSpec() error = %v", err)
	}
	got := spec.Tools[0].Operations[0].Hosts
	want := []string{"xn--bcher-kva.example", "my_api.example.com:8443", "10.0.0.1"}
	if !slices.Equal(got, want) {
		t.Errorf("hosts = %q, want %q", got, want)
	}
}

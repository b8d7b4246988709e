package api

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/aileron-dev/aileron-proxy/internal/hostport"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// ArgProblem is one reason the args of a run call were refused.
type ArgProblem struct {
	// Arg is the argument's name.
	Arg string `json:"arg"`
	// Message says what is wrong and what is expected.
	Message string `json:"message"`
}

// invalidArgs is the 400 invalid_args error for the args of what (an
// operation or an action), listing every problem in the message and in
// the "problems" field.
func invalidArgs(what string, problems []ArgProblem) *Error {
	msgs := make([]string, len(problems))
	for i, p := range problems {
		msgs[i] = p.Arg + ": " + p.Message
	}
	return apiErr(http.StatusBadRequest, CodeInvalidArgs,
		fmt.Sprintf("the args of %s do not match its inputs: %s", what, strings.Join(msgs, "; "))).
		with("problems", problems)
}

// call is an upstream request built from an operation and its args.
type call struct {
	method      string
	url         string
	body        []byte // nil when the request has no body
	contentType string
	// auditArgs is the HeaderAuditArgs value, or "".
	auditArgs string
}

var plainInteger = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)

// maxExponent bounds the exponent of a number literal we expand, so "1e999999999"
// cannot make us allocate a huge integer.
const maxExponent = 400

// exactInteger returns n printed as an exact integer ("1e6" → "1000000"),
// or ok=false when n is not an integer or is out of range.
func exactInteger(n json.Number) (string, bool) {
	s := n.String()
	if plainInteger.MatchString(s) {
		if s == "-0" {
			return "0", true
		}
		return s, true
	}
	if !exponentInRange(s) {
		return "", false
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok || !r.IsInt() {
		return "", false
	}
	return r.Num().String(), true
}

// exponentInRange reports whether the number literal s has no exponent or
// one within ±maxExponent.
func exponentInRange(s string) bool {
	i := strings.IndexAny(s, "eE")
	if i < 0 {
		return true
	}
	exp, err := strconv.Atoi(s[i+1:])
	return err == nil && exp <= maxExponent && exp >= -maxExponent
}

// normalNumber returns n as an exact integer when it is one, else as sent.
func normalNumber(n json.Number) json.Number {
	if s, ok := exactInteger(n); ok {
		return json.Number(s)
	}
	return n
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// checkValue validates v against t and returns it normalized (numbers
// exact), or a problem message.
func checkValue(t policy.InputType, v any) (any, string) {
	if v == nil {
		return nil, fmt.Sprintf("must be %s, not null (omit the argument instead)", article(t))
	}
	switch t {
	case policy.InputString, "":
		if _, ok := v.(string); ok {
			return v, ""
		}
	case policy.InputInteger:
		if n, ok := v.(json.Number); ok {
			if s, ok := exactInteger(n); ok {
				return json.Number(s), ""
			}
			return nil, fmt.Sprintf("must be an integer, got %s", n)
		}
	case policy.InputNumber:
		if n, ok := v.(json.Number); ok {
			// Keep a non-integer literal as sent, but refuse absurd
			// exponents.
			if !exponentInRange(n.String()) {
				return nil, fmt.Sprintf("number %s is out of range", n)
			}
			return normalNumber(n), ""
		}
	case policy.InputBoolean:
		if _, ok := v.(bool); ok {
			return v, ""
		}
	case policy.InputArray:
		arr, ok := v.([]any)
		if !ok {
			break
		}
		out := make([]any, len(arr))
		for i, el := range arr {
			switch x := el.(type) {
			case string, bool:
				out[i] = x
			case json.Number:
				out[i] = normalNumber(x)
			default:
				return nil, fmt.Sprintf("element %d must be a string, number or boolean, got %s", i, typeName(el))
			}
		}
		return out, ""
	case policy.InputObject:
		if _, ok := v.(map[string]any); ok {
			return v, ""
		}
	default:
		return nil, fmt.Sprintf("has an unsupported input type %q in the connector spec", string(t))
	}
	return nil, fmt.Sprintf("must be %s, got %s", article(t), typeName(v))
}

func article(t policy.InputType) string {
	switch t {
	case policy.InputInteger, policy.InputArray, policy.InputObject:
		return "an " + string(t)
	case "":
		return "a string"
	}
	return "a " + string(t)
}

// scalarString prints a normalized scalar for a path segment or a query
// value.
func scalarString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case json.Number:
		return x.String(), true
	case bool:
		return strconv.FormatBool(x), true
	}
	return "", false
}

// bodyMethods send their remaining args as a JSON body; every other method
// sends them as query parameters.
func sendsBody(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
		return true
	}
	return false
}

// buildCall validates args against the compiled operation c, which must be
// proxyable, and builds the upstream request. Every problem is reported,
// not just the first.
func buildCall(c *policy.CompiledOperation, args map[string]any) (*call, []ArgProblem) {
	var problems []ArgProblem
	add := func(arg, msg string) { problems = append(problems, ArgProblem{Arg: arg, Message: msg}) }
	op, tmpl, schema := c.Operation(), c.Template(), c.Inputs()

	// Missing required inputs and path parameters, in spec order.
	for _, in := range schema.Inputs() {
		if _, ok := args[in.Name]; !ok && (in.Required || tmpl.HasParam(in.Name)) {
			add(in.Name, fmt.Sprintf("required argument is missing (%s)", article(in.Type)))
		}
	}
	for _, t := range tmpl.Params() {
		if _, declared := schema.Input(t); declared {
			continue
		}
		if _, ok := args[t]; !ok {
			add(t, fmt.Sprintf("path parameter {%s} is missing", t))
		}
	}

	values := map[string]any{}
	for _, k := range slices.Sorted(maps.Keys(args)) {
		in, declared := schema.Input(k)
		if !declared && !tmpl.HasParam(k) {
			msg := "unknown argument; this operation takes no arguments"
			if names := schema.Names(); len(names) > 0 {
				msg = "unknown argument; this operation takes: " + strings.Join(names, ", ")
			}
			add(k, msg)
			continue
		}
		t := in.Type
		if !declared {
			t = policy.InputString
			if _, ok := args[k].(json.Number); ok {
				t = policy.InputNumber
			}
		}
		v, msg := checkValue(t, args[k])
		if msg != "" {
			add(k, msg)
			continue
		}
		values[k] = v
	}

	// Path.
	var path strings.Builder
	for _, seg := range tmpl.Segments() {
		path.WriteByte('/')
		if !seg.IsParam() {
			path.WriteString(seg.Raw())
			continue
		}
		name, suffix := seg.Param(), seg.Suffix()
		v, ok := values[name]
		if !ok {
			continue // already reported
		}
		str, scalar := scalarString(v)
		switch {
		case !scalar:
			add(name, fmt.Sprintf("path parameter {%s} must be a string, number or boolean, got %s", name, typeName(v)))
		case str == "":
			add(name, fmt.Sprintf("path parameter {%s} must not be empty", name))
		case str == "." || str == "..":
			add(name, fmt.Sprintf("path parameter {%s} must not be %q", name, str))
		case strings.ContainsAny(str, `/\`):
			add(name, fmt.Sprintf(`path parameter {%s} must be a single path segment (no "/" or "\")`, name))
		case suffix != "" && strings.Contains(str, ":"):
			add(name, fmt.Sprintf(`path parameter {%s} must not contain ":": the path puts the custom method %q after it`, name, suffix))
		default:
			path.WriteString(url.PathEscape(str) + suffix)
		}
		delete(values, name)
	}

	cl := &call{method: op.Method}
	var query url.Values
	if sendsBody(op.Method) {
		body, err := json.Marshal(values)
		if err != nil {
			add("args", fmt.Sprintf("cannot be encoded as JSON: %s", err))
		}
		cl.body = body
		cl.contentType = "application/json"
	} else {
		query = url.Values{}
		for _, k := range slices.Sorted(maps.Keys(values)) {
			switch x := values[k].(type) {
			case []any:
				for _, el := range x {
					s, _ := scalarString(el)
					query.Add(k, s)
				}
			case map[string]any:
				add(k, fmt.Sprintf("an object cannot be sent as a query parameter of a %s request", op.Method))
			default:
				s, _ := scalarString(x)
				query.Set(k, s)
			}
		}
	}
	if len(problems) > 0 {
		return nil, problems
	}

	u := "https://" + urlHost(c.Hosts()[0]) + path.String()
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	cl.url = u
	cl.auditArgs = auditArgsHeader(c, args)
	return cl, nil
}

// urlHost turns a compiled host ("h:443", "h:8443", "[::1]:8443") into a
// URL host, dropping the default port.
func urlHost(host string) string {
	hp, err := hostport.New(host)
	if err != nil {
		return host
	}
	if hp.Port == 443 {
		hp.Port = 0
	}
	return hp.String()
}

// auditArgsHeader encodes the args named by the operation's args.<input>
// audit sources as base64url(JSON object keyed by input name, values as
// sent with numbers made exact), or "" when there are none. The proxy evaluates the
// audit fields, redacting where the spec asks; the header travels only
// from the API to the proxy and the proxy strips it.
func auditArgsHeader(c *policy.CompiledOperation, args map[string]any) string {
	picked := map[string]any{}
	for _, src := range c.AuditSources() {
		if src.Kind() != policy.AuditFromArgs {
			continue
		}
		name := src.Name()
		v, present := args[name]
		if !present {
			continue
		}
		if n, ok := v.(json.Number); ok {
			v = normalNumber(n)
		}
		picked[name] = v
	}
	if len(picked) == 0 {
		return ""
	}
	b, err := json.Marshal(picked)
	if err != nil {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

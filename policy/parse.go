package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Problem is one thing wrong with a spec (or, among warnings, one thing
// worth fixing), located by its JSON path such as
// `tools[1].operations[0].hosts[0]`. Path is "" for the document itself.
type Problem struct {
	Path    string
	Message string
}

// String returns "<path>: <message>", or the message alone for the document.
func (p Problem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// ValidationError holds every problem found in a spec, in document order
// (within an object, fields in the order the schema lists them).
type ValidationError struct {
	Problems []Problem
}

// Error lists the problems, one per line.
func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// SyntaxError is a spec that is not well-formed JSON. Line and Column are
// 1-based; Column counts characters (runes).
type SyntaxError struct {
	Line, Column int
	// Offset is the byte offset of the error in the input.
	Offset int64
	// Msg is the JSON decoder's description, e.g. "invalid character '}'
	// looking for beginning of object key string".
	Msg string
	err error
}

// Error returns "line L, column C: <msg>".
func (e *SyntaxError) Error() string {
	return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Column, e.Msg)
}

// Unwrap returns the underlying *json.SyntaxError.
func (e *SyntaxError) Unwrap() error { return e.err }

// ParseSpec parses and validates an aileron.connector.v1 document.
//
// On success the Spec holds normalized values (see Spec) and warnings lists
// unknown fields, duplicate hosts and operations that are not proxyable; none
// of them stop the spec from loading. On failure spec is nil and err is a
// *SyntaxError (with line and column) when data is not JSON, or a
// *ValidationError listing every problem, each with its JSON path; warnings
// are returned in both cases.
//
// Duplicate object keys are errors: JSON readers disagree on which value
// wins, and a spec must mean the same thing to a reviewer and to the proxy.
// A JSON null is treated as if the field were absent.
func ParseSpec(data []byte) (spec *Spec, warnings []Problem, err error) {
	root, err := parseJSON(data)
	if err != nil {
		return nil, nil, err
	}
	c := &checker{}
	s := c.spec(root)
	if len(c.problems) > 0 {
		return nil, c.warnings, &ValidationError{Problems: c.problems}
	}
	return s, c.warnings, nil
}

// jkind is the JSON type of a node.
type jkind int

const (
	jNull jkind = iota
	jBool
	jNumber
	jString
	jArray
	jObject
)

func (k jkind) String() string {
	return [...]string{"null", "boolean", "number", "string", "array", "object"}[k]
}

// jnode is a parsed JSON value. Objects keep their keys in document order;
// dups lists keys that appeared more than once (the first value is kept).
type jnode struct {
	kind jkind
	str  string
	b    bool
	arr  []*jnode
	keys []string
	vals map[string]*jnode
	dups []string
}

// parseJSON checks data is one well-formed JSON value and builds its tree.
func parseJSON(data []byte) (*jnode, error) {
	var raw json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, newSyntaxError(data, se)
		}
		return nil, fmt.Errorf("parsing spec: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	n, err := readNode(dec)
	if err != nil {
		return nil, fmt.Errorf("parsing spec: %w", err)
	}
	return n, nil
}

func newSyntaxError(data []byte, se *json.SyntaxError) *SyntaxError {
	p := int(se.Offset)
	if p > 0 && se.Error() != "unexpected end of JSON input" {
		p-- // Offset counts the offending byte; point at it
	}
	if p > len(data) {
		p = len(data)
	}
	start := bytes.LastIndexByte(data[:p], '\n') + 1
	return &SyntaxError{
		Line:   bytes.Count(data[:p], []byte{'\n'}) + 1,
		Column: utf8.RuneCount(data[start:p]) + 1,
		Offset: int64(p),
		Msg:    se.Error(),
		err:    se,
	}
}

func readNode(dec *json.Decoder) (*jnode, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			n := &jnode{kind: jObject, vals: map[string]*jnode{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, _ := kt.(string)
				v, err := readNode(dec)
				if err != nil {
					return nil, err
				}
				if _, dup := n.vals[key]; dup {
					n.dups = append(n.dups, key)
					continue
				}
				n.keys = append(n.keys, key)
				n.vals[key] = v
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return n, nil
		case '[':
			n := &jnode{kind: jArray}
			for dec.More() {
				v, err := readNode(dec)
				if err != nil {
					return nil, err
				}
				n.arr = append(n.arr, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return n, nil
		}
		return nil, fmt.Errorf("unexpected %q", t)
	case string:
		return &jnode{kind: jString, str: t}, nil
	case json.Number:
		return &jnode{kind: jNumber, str: string(t)}, nil
	case bool:
		return &jnode{kind: jBool, b: t}, nil
	default:
		return &jnode{kind: jNull}, nil
	}
}

// checker walks the JSON tree, builds the Spec and collects problems and
// warnings in document order (fields in schema order within an object).
type checker struct {
	problems []Problem
	warnings []Problem
}

func (c *checker) fail(path, format string, args ...any) {
	c.problems = append(c.problems, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

func (c *checker) warn(path, format string, args ...any) {
	c.warnings = append(c.warnings, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

// field joins a parent path and an object key: `a.b`, or `a["odd key"]` for
// keys that are not plain identifiers.
func field(parent, key string) string {
	plain := key != ""
	for i := 0; i < len(key); i++ {
		if !isAlnum(key[i]) && key[i] != '_' && key[i] != '-' {
			plain = false
		}
	}
	if !plain {
		q, _ := json.Marshal(key)
		return parent + "[" + string(q) + "]"
	}
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// index joins a parent path and an array index: `a[3]`.
func index(parent string, i int) string { return parent + "[" + strconv.Itoa(i) + "]" }

// obj is an object node being read, with its path.
type obj struct {
	path string
	n    *jnode
}

// get returns the non-null value of key, or nil.
func (o obj) get(key string) *jnode {
	if o.n == nil {
		return nil
	}
	v := o.n.vals[key]
	if v == nil || v.kind == jNull {
		return nil
	}
	return v
}

// object checks that n (at path) is an object, reports duplicate keys and
// warns about keys not in known. A missing or null node reads as an empty
// object; ok is false only when n has the wrong type.
func (c *checker) object(path string, n *jnode, known ...string) (o obj, ok bool) {
	if n == nil || n.kind == jNull {
		return obj{path: path}, true
	}
	if n.kind != jObject {
		if path == "" {
			c.fail(path, "the spec must be a JSON object, got %s", n.kind)
		} else {
			c.fail(path, "must be an object, got %s", n.kind)
		}
		return obj{path: path}, false
	}
	for _, k := range n.dups {
		c.fail(field(path, k), "duplicate key %q; JSON readers disagree on which value wins, so keep only one", k)
	}
	for _, k := range n.keys {
		if !slices.Contains(known, k) {
			msg := fmt.Sprintf("unknown field %q is ignored", k)
			if s := suggest(k, known); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			}
			c.warn(field(path, k), "%s", msg)
		}
	}
	return obj{path: path, n: n}, true
}

// str reads an optional string field; ok is false after a type error.
func (c *checker) str(o obj, key string) (string, bool) {
	v := o.get(key)
	if v == nil {
		return "", true
	}
	if v.kind != jString {
		c.fail(field(o.path, key), "must be a string, got %s", v.kind)
		return "", false
	}
	return v.str, true
}

// boolean reads an optional boolean field.
func (c *checker) boolean(o obj, key string) bool {
	v := o.get(key)
	if v == nil {
		return false
	}
	if v.kind != jBool {
		c.fail(field(o.path, key), "must be true or false, got %s", v.kind)
		return false
	}
	return v.b
}

// list reads an optional array field; ok is false after a type error.
func (c *checker) list(o obj, key string) ([]*jnode, bool) {
	v := o.get(key)
	if v == nil {
		return nil, true
	}
	if v.kind != jArray {
		c.fail(field(o.path, key), "must be an array, got %s", v.kind)
		return nil, false
	}
	return v.arr, true
}

// suggest returns the known field closest to k (case-insensitive match or
// edit distance at most 2), or "".
func suggest(k string, known []string) string {
	best, bestD := "", 3
	for _, x := range known {
		if strings.EqualFold(x, k) {
			return x
		}
		if d := editDistance(strings.ToLower(k), x, bestD); d < bestD {
			best, bestD = x, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, or limit when it is at
// least limit (long inputs are not compared).
func editDistance(a, b string, limit int) int {
	if len(a) > 64 || len(b) > 64 || abs(len(a)-len(b)) >= limit {
		return limit
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	if prev[len(b)] > limit {
		return limit
	}
	return prev[len(b)]
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

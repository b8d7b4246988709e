package openapiimport

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pb33f/go-yaml"
	"github.com/pb33f/libopenapi"
	"github.com/pb33f/libopenapi/datamodel"
)

// MaxDocumentSize caps each file of a description (the document and every
// local file its $refs name).
const MaxDocumentSize = 64 << 20

// Source is a description to import: its bytes and where they came from.
type Source struct {
	// Data is the document, JSON or YAML.
	Data []byte
	// Name says where Data came from (a file path or a URL) in messages.
	Name string
	// Dir is the directory relative $refs to other files resolve against;
	// "" refuses every $ref to another file (a document fetched from a URL).
	Dir string
}

// ReadFile reads the description at path, bounded by MaxDocumentSize.
func ReadFile(path string) (Source, error) {
	f, err := os.Open(path)
	if err != nil {
		return Source{}, fmt.Errorf("reading the description: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxDocumentSize+1))
	if err != nil {
		return Source{}, fmt.Errorf("reading the description %s: %w", path, err)
	}
	if len(data) > MaxDocumentSize {
		return Source{}, fmt.Errorf("reading the description %s: it is over the %d-byte limit", path, MaxDocumentSize)
	}
	return Source{Data: data, Name: path, Dir: filepath.Dir(path)}, nil
}

// LocationError is a problem with the description, located by file and JSON
// pointer (or line).
type LocationError struct {
	// File is the document or referenced file the problem is in.
	File string
	// Pointer is the JSON pointer of the offending value, e.g.
	// "/paths/~1pets/get/parameters/0/$ref"; "" when Line locates it.
	Pointer string
	// Line is 1-based; 0 when unknown.
	Line int
	// Msg says what is wrong and how to fix it.
	Msg string
}

// Error returns "<file>: <pointer or line N>: <msg>".
func (e *LocationError) Error() string {
	loc := e.File
	switch {
	case e.Pointer != "" && e.Line > 0:
		loc += fmt.Sprintf(": %s (line %d)", e.Pointer, e.Line)
	case e.Pointer != "":
		loc += ": " + e.Pointer
	case e.Line > 0:
		loc += fmt.Sprintf(": line %d", e.Line)
	}
	return loc + ": " + e.Msg
}

// loaded is a parsed description, its version family and the files it uses.
type loaded struct {
	doc     libopenapi.Document
	version int // 2 or 3
	minor   string
}

// load parses src with libopenapi after checking every $ref: a $ref to a
// remote URL is refused, and every $ref to a local file must name a
// readable file (they are then resolved by libopenapi).
func load(src Source) (*loaded, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(src.Data, &root); err != nil {
		return nil, &LocationError{File: src.Name, Line: yamlErrLine(err), Msg: fmt.Sprintf("not valid JSON or YAML: %s", trimYAMLErr(err))}
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return nil, &LocationError{File: src.Name, Line: 1, Msg: "not an OpenAPI description: the document must be an object with \"openapi\" or \"swagger\" at its top"}
	}
	top := root.Content[0]
	version, minor := 0, ""
	if v := mapValue(top, "swagger"); v != nil {
		if v.Value != "2.0" {
			return nil, &LocationError{File: src.Name, Pointer: "/swagger", Line: v.Line, Msg: fmt.Sprintf("swagger %q is not supported; only 2.0 is", v.Value)}
		}
		version = 2
	} else if v := mapValue(top, "openapi"); v != nil {
		switch {
		case strings.HasPrefix(v.Value, "3.0"), strings.HasPrefix(v.Value, "3.1"):
			version, minor = 3, v.Value
		default:
			return nil, &LocationError{File: src.Name, Pointer: "/openapi", Line: v.Line, Msg: fmt.Sprintf("openapi %q is not supported; use a 2.0, 3.0 or 3.1 description", v.Value)}
		}
	} else {
		return nil, &LocationError{File: src.Name, Line: top.Line, Msg: "not an OpenAPI description: neither \"openapi\" nor \"swagger\" is set at its top"}
	}
	if mapValue(top, "paths") == nil {
		return nil, &LocationError{File: src.Name, Line: top.Line, Msg: "the description has no \"paths\", so no operations to import"}
	}

	files := map[string]bool{}
	if err := checkRefs(src, top, "", files); err != nil {
		return nil, err
	}
	cfg := &datamodel.DocumentConfiguration{
		Logger:                slog.New(slog.NewTextHandler(io.Discard, nil)),
		AllowRemoteReferences: false,
	}
	if len(files) > 0 {
		cfg.BasePath = src.Dir
		cfg.AllowFileReferences = true
		for f := range files {
			cfg.FileFilter = append(cfg.FileFilter, f)
		}
	}
	doc, err := libopenapi.NewDocumentWithConfiguration(src.Data, cfg)
	if err != nil {
		return nil, &LocationError{File: src.Name, Msg: fmt.Sprintf("reading the description: %s", err)}
	}
	return &loaded{doc: doc, version: version, minor: minor}, nil
}

// checkRefs walks n (at JSON pointer ptr of the file named by src) and
// checks every $ref: remote URLs are refused, local files must exist and
// are checked in turn; files collects their paths relative to the root's
// directory.
func checkRefs(src Source, n *yaml.Node, ptr string, files map[string]bool) error {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := ptr + "/" + escapePointer(k.Value)
			if k.Value == "$ref" && v.Kind == yaml.ScalarNode {
				if err := checkRef(src, v, p, files); err != nil {
					return err
				}
				continue
			}
			if err := checkRefs(src, v, p, files); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if err := checkRefs(src, c, ptr+"/"+strconv.Itoa(i), files); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkRef(src Source, v *yaml.Node, ptr string, files map[string]bool) error {
	ref := v.Value
	file, _, _ := strings.Cut(ref, "#")
	if file == "" {
		return nil
	}
	lower := strings.ToLower(file)
	if strings.Contains(lower, "://") || strings.HasPrefix(lower, "//") {
		return &LocationError{File: src.Name, Pointer: ptr, Line: v.Line, Msg: fmt.Sprintf("$ref %q points to a remote URL; an import never fetches more than the document it is given: save that file next to the document and refer to it by a relative path", ref)}
	}
	if src.Dir == "" {
		return &LocationError{File: src.Name, Pointer: ptr, Line: v.Line, Msg: fmt.Sprintf("$ref %q names another file, but the document was not read from a file; download the description with its files and import it from disk", ref)}
	}
	path := filepath.Join(src.Dir, filepath.FromSlash(file))
	rel := filepath.ToSlash(file)
	if files[rel] {
		return nil
	}
	sub, err := ReadFile(path)
	if err != nil {
		return &LocationError{File: src.Name, Pointer: ptr, Line: v.Line, Msg: fmt.Sprintf("$ref %q does not resolve: %s", ref, errors.Unwrap(err))}
	}
	files[rel] = true
	var root yaml.Node
	if err := yaml.Unmarshal(sub.Data, &root); err != nil {
		return &LocationError{File: path, Line: yamlErrLine(err), Msg: fmt.Sprintf("not valid JSON or YAML: %s", trimYAMLErr(err))}
	}
	if len(root.Content) == 0 {
		return nil
	}
	// $refs inside the other file resolve against its own directory, but
	// files are recorded relative to the root document's directory.
	subSrc := Source{Name: path, Dir: filepath.Dir(path)}
	relDir := filepath.Dir(file)
	inner := map[string]bool{}
	for k := range files {
		inner[k] = true
	}
	if err := checkRefs(subSrc, root.Content[0], "", inner); err != nil {
		return err
	}
	for k := range inner {
		if !files[k] {
			if k != rel && !strings.HasPrefix(k, "/") {
				files[filepath.ToSlash(filepath.Join(relDir, k))] = true
			}
		}
	}
	return nil
}

// mapValue returns the value of key in mapping n, or nil.
func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// escapePointer escapes a JSON pointer token (RFC 6901).
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// yamlErrLine extracts "line N" (or "at LN.CM") from a YAML error, or 0.
func yamlErrLine(err error) int {
	msg := err.Error()
	i, skip := strings.Index(msg, "line "), len("line ")
	if i < 0 {
		i, skip = strings.Index(msg, " at L"), len(" at L")
	}
	if i < 0 {
		return 0
	}
	j := i + skip
	k := j
	for k < len(msg) && msg[k] >= '0' && msg[k] <= '9' {
		k++
	}
	n, _ := strconv.Atoi(msg[j:k])
	return n
}

func trimYAMLErr(err error) string {
	return strings.TrimPrefix(err.Error(), "yaml: ")
}

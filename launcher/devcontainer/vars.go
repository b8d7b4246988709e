package devcontainer

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tailscale/hujson"
)

// VarContext is what devcontainer ${...} variables resolve to.
type VarContext struct {
	// LocalEnv looks up ${localEnv:VAR} (and its alias ${env:VAR}) in the
	// environment of the launching process; nil means os.LookupEnv.
	LocalEnv func(string) (string, bool)
	// ContainerEnv looks up ${containerEnv:VAR}; nil leaves such
	// references as written (they resolve once the container's environment
	// is known).
	ContainerEnv func(string) (string, bool)
	// LocalWorkspaceFolder is the project directory on the host;
	// ContainerWorkspaceFolder is where it is mounted.
	LocalWorkspaceFolder, ContainerWorkspaceFolder string
	// DevContainerID is ${devcontainerId} (see DevContainerID).
	DevContainerID string
}

// Substitute expands the devcontainer variables in s as the devcontainer
// CLI does: each ${name} or ${name:arg[:default]} is replaced; a
// reference to an unknown variable is left as written, and so is an
// unterminated "${". ${localEnv:VAR:default} gives default when VAR is
// unset or empty; only the first ':' after VAR separates the default, the
// rest (like the CLI) is dropped.
func Substitute(s string, vc VarContext) string {
	if !strings.Contains(s, "${") {
		return s
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			break
		}
		j := strings.IndexByte(s[i+2:], '}')
		if j < 0 {
			break
		}
		b.WriteString(s[:i])
		expr := s[i+2 : i+2+j]
		if v, ok := vc.lookup(expr); ok {
			b.WriteString(v)
		} else {
			b.WriteString(s[i : i+3+j])
		}
		s = s[i+3+j:]
	}
	b.WriteString(s)
	return b.String()
}

// lookup resolves one ${expr}; ok is false for a variable left as written.
func (vc VarContext) lookup(expr string) (string, bool) {
	parts := strings.Split(expr, ":")
	name, args := parts[0], parts[1:]
	envLookup := func(get func(string) (string, bool)) (string, bool) {
		if len(args) == 0 {
			return "", false
		}
		if v, ok := get(args[0]); ok && v != "" {
			return v, true
		}
		if len(args) > 1 {
			return args[1], true
		}
		return "", true
	}
	switch name {
	case "localEnv", "env":
		get := vc.LocalEnv
		if get == nil {
			get = os.LookupEnv
		}
		return envLookup(get)
	case "containerEnv":
		if vc.ContainerEnv == nil {
			return "", false
		}
		return envLookup(vc.ContainerEnv)
	case "localWorkspaceFolder":
		return vc.LocalWorkspaceFolder, vc.LocalWorkspaceFolder != ""
	case "localWorkspaceFolderBasename":
		return filepath.Base(vc.LocalWorkspaceFolder), vc.LocalWorkspaceFolder != ""
	case "containerWorkspaceFolder":
		return vc.ContainerWorkspaceFolder, vc.ContainerWorkspaceFolder != ""
	case "containerWorkspaceFolderBasename":
		return pathBase(vc.ContainerWorkspaceFolder), vc.ContainerWorkspaceFolder != ""
	case "devcontainerId":
		return vc.DevContainerID, vc.DevContainerID != ""
	}
	return "", false
}

func pathBase(p string) string {
	p = strings.TrimRight(p, "/")
	return p[strings.LastIndexByte(p, '/')+1:]
}

// substituteMap returns m with every value substituted; nil stays nil.
func SubstituteMap(m map[string]string, vc VarContext) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = Substitute(v, vc)
	}
	return out
}

// DevContainerID is ${devcontainerId} for a project, derived like the
// devcontainer CLI's from the labels it puts on the container
// (devcontainer.local_folder and devcontainer.config_file): the SHA-256 of
// their JSON, in base 32, 52 characters. It is stable across launches of
// the same project.
func ID(projectDir, configFile string) string {
	labels, _ := json.Marshal(map[string]string{
		"devcontainer.config_file":  configFile,
		"devcontainer.local_folder": projectDir,
	})
	sum := sha256.Sum256(labels)
	id := new(big.Int).SetBytes(sum[:]).Text(32)
	return strings.Repeat("0", max(0, 52-len(id))) + id
}

// dropNulls returns object v without its null members (remoteEnv's way of
// saying "not set"); other values are returned as they are.
func dropNulls(v *hujson.Value) *hujson.Value {
	obj, ok := v.Value.(*hujson.Object)
	if !ok {
		return v
	}
	kept := &hujson.Object{}
	for _, m := range obj.Members {
		if lit, ok := m.Value.Value.(hujson.Literal); ok && lit.Kind() == 'n' {
			continue
		}
		kept.Members = append(kept.Members, m)
	}
	return &hujson.Value{BeforeExtra: v.BeforeExtra, StartOffset: v.StartOffset, Value: kept}
}

// LocalEnvNames lists the variables the project's devcontainer.json reads
// with ${localEnv:VAR} or ${env:VAR}, sorted: what a caller that composes
// the sandbox elsewhere (sandbox up asks the daemon) sends along, so the
// variables resolve from its environment and never the daemon's. Each
// string of the file is expanded with Substitute, so the grammar is the
// one the launch uses. No file means none; a file that does not parse is
// an error.
func LocalEnvNames(projectDir string) ([]string, error) {
	path := filepath.Join(projectDir, Path)
	raw, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	std, err := hujson.Standardize(raw)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	var doc any
	if err := json.Unmarshal(std, &doc); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	seen := map[string]bool{}
	vc := VarContext{LocalEnv: func(name string) (string, bool) {
		seen[name] = true
		return "", false
	}}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			Substitute(v, vc)
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for k, e := range v {
				Substitute(k, vc)
				walk(e)
			}
		}
	}
	walk(doc)
	return slices.Sorted(maps.Keys(seen)), nil
}

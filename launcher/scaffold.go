package launcher

import (
	_ "embed" // the scaffold templates
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/aileron-dev/aileron-proxy/internal/atomicfile"
	"github.com/aileron-dev/aileron-proxy/launcher/devcontainer"
)

// The starter files `sandbox init` writes. Strings, so they are immutable.
var (
	//go:embed scaffold/devcontainer.json
	scaffoldDevContainer string
	//go:embed scaffold/Dockerfile
	scaffoldDockerfile string
	//go:embed scaffold/agent/devcontainer.json
	scaffoldAgentDevContainer string
	//go:embed scaffold/agent/Dockerfile
	scaffoldAgentDockerfile string
)

// InitOptions adjusts Init.
type InitOptions struct {
	// Force overwrites existing files; without it Init refuses to touch them.
	Force bool
	// BaseVersion is the sandbox-base tag the Dockerfile extends; empty
	// means BaseVersion.
	BaseVersion string
	// Agent names a recipe (see AgentNames) that installs that agent;
	// empty writes the generic starter files.
	Agent string
}

// ScaffoldFiles returns the starter files keyed by path relative to the
// project ("/"-separated), as Init writes them.
func ScaffoldFiles(baseVersion string) map[string][]byte {
	if baseVersion == "" {
		baseVersion = BaseVersion
	}
	return map[string][]byte{
		devcontainer.Path:          []byte(scaffoldDevContainer),
		".devcontainer/Dockerfile": []byte(strings.ReplaceAll(scaffoldDockerfile, "{{VERSION}}", baseVersion)),
	}
}

// Init writes .devcontainer/devcontainer.json and .devcontainer/Dockerfile
// into projectDir and returns the paths written, sorted. Without
// opts.Force it writes nothing when either file exists.
func Init(projectDir string, opts InitOptions) ([]string, error) {
	if st, err := os.Stat(projectDir); err != nil {
		return nil, fmt.Errorf("reading project directory: %w (pass an existing directory with --project)", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("reading project directory %q: not a directory", projectDir)
	}
	files := ScaffoldFiles(opts.BaseVersion)
	if opts.Agent != "" {
		a, err := LookupAgent(opts.Agent)
		if err != nil {
			return nil, fmt.Errorf("scaffolding the sandbox: %w", err)
		}
		base := opts.BaseVersion
		if base == "" {
			base = BaseVersion
		}
		dc, df := a.scaffold(base)
		files = map[string][]byte{devcontainer.Path: []byte(dc), ".devcontainer/Dockerfile": []byte(df)}
	}
	mcpFiles, err := agentMCPFiles(projectDir, opts.Agent)
	if err != nil {
		return nil, fmt.Errorf("scaffolding the sandbox: %w", err)
	}
	names := []string{devcontainer.Path, ".devcontainer/Dockerfile"}
	if !opts.Force {
		var existing []string
		for _, name := range names {
			_, err := os.Lstat(filepath.Join(projectDir, filepath.FromSlash(name)))
			switch {
			case err == nil:
				existing = append(existing, name)
			case !errors.Is(err, fs.ErrNotExist):
				return nil, fmt.Errorf("checking %s: %w", name, err)
			}
		}
		if len(existing) > 0 {
			return nil, fmt.Errorf("scaffolding the sandbox: %s already exists; pass --force to overwrite", strings.Join(existing, " and "))
		}
	}
	if err := os.MkdirAll(filepath.Join(projectDir, ".devcontainer"), 0o755); err != nil {
		return nil, fmt.Errorf("creating .devcontainer: %w", err)
	}
	var written []string
	for _, name := range names {
		path := filepath.Join(projectDir, filepath.FromSlash(name))
		if err := atomicfile.WriteFile(path, files[name], 0o644); err != nil {
			return written, fmt.Errorf("writing %s: %w", name, err)
		}
		written = append(written, path)
	}
	more, err := writeMCPFiles(projectDir, mcpFiles)
	return append(written, more...), err
}

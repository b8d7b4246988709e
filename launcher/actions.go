package launcher

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/aileron-dev/aileron-proxy/actions"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// SandboxActionsDir holds the session's installed action manifests, laid
// out as in the action store: sha256/<hex>/action.md.
const SandboxActionsDir = "/opt/aileron/manifests/actions"

// sessionActions returns the active actions whose connector is one of the
// session's.
func sessionActions(all []actions.Installed, conns []policy.Connector) []actions.Installed {
	in := map[string]bool{}
	for _, c := range conns {
		in[c.Spec.Connector.FQN] = true
	}
	var out []actions.Installed
	for _, a := range all {
		if a.IsActive() && in[a.Target.ConnectorFQN] {
			out = append(out, a)
		}
	}
	return out
}

// writeActions copies the manifests of acts into f.dir/actions (readable by
// the image's user; the store is 0700) for the read-only mount at
// SandboxActionsDir. Nothing is written when acts is empty.
func (f *sandboxFiles) writeActions(acts []actions.Installed) error {
	if len(acts) == 0 {
		return nil
	}
	dst := filepath.Join(f.dir, "actions")
	for _, a := range acts {
		hex, ok := strings.CutPrefix(a.Hash, "sha256:")
		if !ok || len(hex) != 64 || strings.Trim(hex, "0123456789abcdef") != "" {
			return fmt.Errorf("copying action %q: unexpected hash %q; reinstall it with \"aileron-proxy action install\"", a.Action.Name, a.Hash)
		}
		data, err := os.ReadFile(filepath.Join(a.Dir, actions.FileName))
		if err != nil {
			return fmt.Errorf("copying action %q: %w", a.Action.Name, err)
		}
		dir := filepath.Join(dst, "sha256", hex)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("copying action %q: %w", a.Action.Name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, actions.FileName), data, 0o644); err != nil {
			return fmt.Errorf("copying action %q: %w", a.Action.Name, err)
		}
	}
	f.actions = dst
	return nil
}

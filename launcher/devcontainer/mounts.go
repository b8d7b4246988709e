package devcontainer

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/tailscale/hujson"
)

// DevContainerMount is one devcontainer "mounts" entry (or
// "workspaceMount") as written: variables unresolved.
type MountSpec struct {
	// Type is "bind" or "volume".
	Type string `json:"type"`
	// Source is a host path (bind) or a volume name (volume; empty makes
	// an anonymous volume).
	Source string `json:"source,omitempty"`
	// Target is the absolute path inside the sandbox.
	Target   string `json:"target"`
	ReadOnly bool   `json:"readonly,omitempty"`
	// Line is where the entry is in devcontainer.json, for refusals.
	Line, Column int `json:"-"`
}

// parseMounts reads "mounts": an array of strings ("type=bind,source=..,
// target=..,readonly") or objects ({"type", "source", "target",
// "readonly"}).
func (p *dcParser) parseMounts(v *hujson.Value) []MountSpec {
	arr, ok := v.Value.(*hujson.Array)
	if !ok {
		p.addf(v, "mounts", "must be an array of mount strings or objects, not %s", kindName(v))
		return nil
	}
	var out []MountSpec
	for i := range arr.Elements {
		if m, ok := p.parseMount(&arr.Elements[i], "mounts"); ok {
			out = append(out, m)
		}
	}
	return out
}

// parseMount reads one mount string or object.
func (p *dcParser) parseMount(v *hujson.Value, key string) (MountSpec, bool) {
	m := MountSpec{Type: "bind"}
	m.Line, m.Column = LineColumn(p.data, v.StartOffset)
	switch x := v.Value.(type) {
	case hujson.Literal:
		s, ok := p.str(v, key, false)
		if !ok {
			return m, false
		}
		for _, field := range strings.Split(s, ",") {
			k, val, _ := strings.Cut(strings.TrimSpace(field), "=")
			switch strings.ToLower(k) {
			case "type":
				m.Type = val
			case "source", "src":
				m.Source = val
			case "target", "destination", "dst":
				m.Target = val
			case "readonly", "ro":
				m.ReadOnly = val == "" || val == "true" || val == "1"
			case "consistency", "":
			default:
				p.addf(v, key, "mount option %q is not supported; use type, source, target and readonly", k)
				return m, false
			}
		}
	case *hujson.Object:
		members, _ := objectMembers(v)
		for _, mem := range members {
			switch mem.name {
			case "type":
				m.Type, _ = p.str(mem.value, key+".type", false)
			case "source":
				m.Source, _ = p.str(mem.value, key+".source", true)
			case "target":
				m.Target, _ = p.str(mem.value, key+".target", false)
			case "readonly":
				m.ReadOnly = p.boolean(mem.value, key+".readonly")
			default:
				p.addf(mem.nameV, key, "mount key %q is not supported; use type, source, target and readonly", mem.name)
				return m, false
			}
		}
		_ = x
	default:
		p.addf(v, key, "each mount must be a string or an object, not %s", kindName(v))
		return m, false
	}
	switch {
	case m.Type != "bind" && m.Type != "volume":
		p.addf(v, key, "mount type %q is not supported; use \"bind\" or \"volume\"", m.Type)
		return m, false
	case m.Target == "":
		p.addf(v, key, "a mount needs a target (the path inside the sandbox)")
		return m, false
	case m.Type == "bind" && m.Source == "":
		p.addf(v, key, "a bind mount needs a source (a host path, e.g. ${localWorkspaceFolder}/data)")
		return m, false
	}
	return m, true
}

// MountRules are the host paths a devcontainer mount may not expose.
type MountRules struct {
	// AileronHome is $AILERON_HOME (connector store, credentials, audit).
	AileronHome string
	// Home is the user's home directory, where credential files live.
	Home string
	// Sockets are container runtime sockets (Docker, Podman).
	Sockets []string
	// Reserved are sandbox paths the launcher mounts itself; a mount may
	// not target one or a path below it.
	Reserved []string
}

// ResolvedMount is a devcontainer mount with its variables resolved and
// its rules checked: a bind of Source (a host path) or a volume named
// Source (anonymous when empty) at Target.
type ResolvedMount struct {
	Source, Target   string
	ReadOnly, Volume bool
}

// credentialFiles are the files and directories under the home directory
// that hold credentials; a mount may not expose them.
var credentialFiles = []string{
	".ssh", ".aws", ".azure", ".gnupg", ".kube", ".docker", ".netrc", ".git-credentials",
	".npmrc", ".pypirc", ".config/gcloud", ".config/gh", ".config/containers/auth.json",
}

// DefaultMountRules returns the rules for this host: aileronHome, the
// user's home, and the usual Docker and Podman sockets ($DOCKER_HOST's
// too).
func DefaultMountRules(aileronHome string) MountRules {
	home, _ := os.UserHomeDir()
	r := MountRules{AileronHome: aileronHome, Home: home, Sockets: []string{
		"/var/run/docker.sock", "/run/docker.sock", "/run/podman/podman.sock", "/var/run/podman/podman.sock",
		fmt.Sprintf("/run/user/%d/podman/podman.sock", os.Getuid()), fmt.Sprintf("/run/user/%d/docker.sock", os.Getuid()),
	}}
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" {
		r.Sockets = append(r.Sockets, filepath.Join(x, "podman", "podman.sock"), filepath.Join(x, "docker.sock"))
	}
	if h, ok := strings.CutPrefix(os.Getenv("DOCKER_HOST"), "unix://"); ok {
		r.Sockets = append(r.Sockets, h)
	}
	return r
}

// exposes reports whether mounting src exposes p: src is p, inside it, or
// one of its parents.
func exposes(src, p string) bool {
	if p == "" {
		return false
	}
	p = realPath(p)
	return src == p || isUnder(src, p) || isUnder(p, src)
}

func isUnder(p, dir string) bool {
	return strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// realPath resolves symlinks where the path exists, else cleans it.
func realPath(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return filepath.Clean(p)
}

// checkMount resolves one mount's variables and applies the rules; it
// returns the runtime mount, or a refusal (rule and fix) or a problem.
// wsTarget is the workspace's target, which no other mount may replace
// (empty when checking the workspace mount itself).
func (r MountRules) CheckMount(m MountSpec, vc VarContext, wsTarget string) (ResolvedMount, string, error) {
	src, target := Substitute(m.Source, vc), Substitute(m.Target, vc)
	out := ResolvedMount{Source: src, Target: target, ReadOnly: m.ReadOnly, Volume: m.Type == "volume"}
	if !path.IsAbs(target) {
		return out, "", fmt.Errorf("target %q must be an absolute path inside the sandbox", target)
	}
	target = path.Clean(target)
	out.Target = target
	if target == "/" {
		return out, "target \"/\" would replace the sandbox's root; mount below it", nil
	}
	for _, t := range r.Reserved {
		if target == t || isUnder(target, t) {
			return out, fmt.Sprintf("target %q is where launch mounts %s; choose another target", target, t), nil
		}
	}
	if target == wsTarget {
		return out, fmt.Sprintf("target %q would replace the project's mount; mount below it or elsewhere", target), nil
	}
	if out.Volume {
		if strings.ContainsAny(src, "/\\") {
			return out, "", fmt.Errorf("volume source %q must be a volume name, not a path (use type=bind for host paths)", src)
		}
		return out, "", nil
	}
	if !filepath.IsAbs(src) {
		return out, "", fmt.Errorf("bind source %q must be an absolute host path (write ${localWorkspaceFolder}/%s for a path in the project)", src, src)
	}
	if _, err := os.Stat(src); err != nil {
		return out, "", fmt.Errorf("bind source %q: %w (create it or fix the path)", src, err)
	}
	real := realPath(src)
	out.Source = real
	switch {
	case real == "/":
		return out, "the host's root directory \"/\" may not be mounted", nil
	case real == "/etc" || isUnder(real, "/etc"):
		return out, fmt.Sprintf("%q is under /etc, the host's system configuration, which may not be mounted", src), nil
	case exposes(real, r.AileronHome):
		return out, fmt.Sprintf("%q exposes $AILERON_HOME (%s: connector store, credentials, audit), which may not be mounted", src, r.AileronHome), nil
	}
	for _, s := range r.Sockets {
		if exposes(real, s) {
			if _, err := os.Stat(s); err == nil || real == realPath(s) {
				return out, fmt.Sprintf("%q exposes the container runtime socket %s, which would let the agent start containers outside the sandbox", src, s), nil
			}
		}
	}
	if r.Home != "" {
		for _, c := range credentialFiles {
			if exposes(real, filepath.Join(r.Home, c)) {
				return out, fmt.Sprintf("%q exposes the credential file ~/%s, which may not be mounted; mount a narrower directory", src, c), nil
			}
		}
	}
	return out, "", nil
}

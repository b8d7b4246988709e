package devcontainer

import (
	"slices"
	"strings"

	"github.com/tailscale/hujson"
)

// runArgFlag is one docker/podman run flag that devcontainer runArgs may
// carry: it limits resources or annotates, and cannot weaken the sandbox.
type runArgFlag struct {
	// long is the canonical --name; value says the flag takes one.
	long  string
	value bool
}

// allowedRunArgs is the runArgs allow-list, keyed by every spelling.
// Anything else (networking, mounts, devices, users, capabilities, security
// options, namespaces, --name, --env) is refused: launch sets those itself.
var allowedRunArgs = map[string]runArgFlag{
	"--memory": {"--memory", true}, "-m": {"--memory", true},
	"--memory-reservation": {"--memory-reservation", true},
	"--memory-swap":        {"--memory-swap", true},
	"--cpus":               {"--cpus", true},
	"--cpu-shares":         {"--cpu-shares", true}, "-c": {"--cpu-shares", true},
	"--pids-limit": {"--pids-limit", true},
	"--shm-size":   {"--shm-size", true},
	"--ulimit":     {"--ulimit", true},
	"--label":      {"--label", true}, "-l": {"--label", true},
	"--hostname": {"--hostname", true}, "-h": {"--hostname", true},
	"--init": {"--init", false},
}

// AllowedRunArgs lists the runArgs flags the sandbox accepts, for docs and
// messages.
func AllowedRunArgs() []string { return allowedNames(allowedRunArgs) }

// refusef records that key is refused, with why and the fix.
func (p *dcParser) refusef(v *hujson.Value, key, format string, args ...any) {
	before := len(p.problems)
	p.addf(v, key, "refused: "+format, args...)
	p.dc.Refused = append(p.dc.Refused, p.problems[before:]...)
	p.problems = p.problems[:before]
}

// parseRefusable handles the keys the sandbox refuses (or accepts only in
// their harmless form); it reports whether it handled m.
func (p *dcParser) parseRefusable(m member) bool {
	switch m.name {
	case "privileged":
		if p.boolean(m.value, m.name) {
			p.refusef(m.value, m.name, "the sandbox never runs privileged (it would reach the host's devices and kernel); remove the key")
		}
	case "capAdd":
		for _, c := range p.strings(m.value, m.name) {
			p.refusef(m.value, m.name, "capability %q is not granted: the sandbox drops every capability; remove it (install what needs it in the Dockerfile, which runs as root)", c)
		}
	case "securityOpt":
		for _, o := range p.strings(m.value, m.name) {
			if !isNoNewPrivileges(o) {
				p.refusef(m.value, m.name, "%q could weaken isolation; only \"no-new-privileges\" is accepted (the sandbox sets it anyway)", o)
			}
		}
	case "runArgs":
		p.parseRunArgs(m.value)
	case "forwardPorts", "appPort":
		if !isEmptyValue(m.value) {
			p.refusef(m.value, m.name, "the sandbox accepts no inbound connections (its network has no route in or out); remove the key")
		}
	case "init":
		if p.boolean(m.value, m.name) {
			p.dc.RunArgs = append(p.dc.RunArgs, "--init")
		}
	case "dockerComposeFile":
		p.refusef(m.value, m.name, "Docker Compose devcontainers are not supported yet; use build.dockerfile or image")
	default:
		return false
	}
	return true
}

// isNoNewPrivileges reports whether a securityOpt entry only sets
// no-new-privileges.
func isNoNewPrivileges(o string) bool {
	switch strings.TrimSpace(o) {
	case "no-new-privileges", "no-new-privileges:true", "no-new-privileges=true":
		return true
	}
	return false
}

// isEmptyValue reports whether v is null, false, "", [] or {}.
func isEmptyValue(v *hujson.Value) bool {
	switch x := v.Value.(type) {
	case hujson.Literal:
		return x.Kind() == 'n' || x.Kind() == 'f' || (x.Kind() == '"' && x.String() == "")
	case *hujson.Array:
		return len(x.Elements) == 0
	case *hujson.Object:
		return len(x.Members) == 0
	}
	return false
}

// boolean reads true or false; a problem is recorded otherwise.
func (p *dcParser) boolean(v *hujson.Value, key string) bool {
	lit, isLit := v.Value.(hujson.Literal)
	if !isLit || (lit.Kind() != 't' && lit.Kind() != 'f') {
		p.addf(v, key, "must be true or false, not %s", kindName(v))
		return false
	}
	return lit.Kind() == 't'
}

// strings reads an array of strings; bad elements are recorded.
func (p *dcParser) strings(v *hujson.Value, key string) []string {
	arr, ok := v.Value.(*hujson.Array)
	if !ok {
		p.addf(v, key, "must be an array of strings, not %s", kindName(v))
		return nil
	}
	var out []string
	for i := range arr.Elements {
		if s, ok := p.str(&arr.Elements[i], key, false); ok {
			out = append(out, s)
		}
	}
	return out
}

// allowedBuildOptions is the build.options allow-list: cache, platform,
// labels and resource limits. Anything else (--network, --add-host,
// --allow, --ssh, --secret, --build-context, -v, --output, --iidfile,
// ...) is refused: it could reach host files, credentials or networks.
var allowedBuildOptions = map[string]runArgFlag{
	"--no-cache": {"--no-cache", false}, "--pull": {"--pull", false},
	"--quiet": {"--quiet", false}, "-q": {"--quiet", false},
	"--label": {"--label", true}, "--platform": {"--platform", true},
	"--shm-size": {"--shm-size", true}, "--ulimit": {"--ulimit", true},
	"--memory": {"--memory", true}, "-m": {"--memory", true},
}

// allowedNames lists the canonical names of an allow-list, sorted.
func allowedNames(list map[string]runArgFlag) []string {
	seen := map[string]bool{}
	var out []string
	for _, f := range list {
		if !seen[f.long] {
			seen[f.long] = true
			out = append(out, f.long)
		}
	}
	slices.Sort(out)
	return out
}

// parseRunArgs keeps the runArgs on the allow-list and refuses the rest.
func (p *dcParser) parseRunArgs(v *hujson.Value) {
	p.dc.RunArgs = append(p.dc.RunArgs, p.allowedFlags(v, "runArgs", allowedRunArgs,
		"launch sets networking, mounts, users, capabilities and security itself")...)
}

// allowedFlags reads an array of command-line flags (--flag value or
// --flag=value) and returns those on list as --flag or --flag=value;
// the others are refused, with why.
func (p *dcParser) allowedFlags(v *hujson.Value, key string, list map[string]runArgFlag, why string) []string {
	args := p.strings(v, key)
	allowed := quoteList(allowedNames(list))
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, hasVal := strings.Cut(a, "=")
		f, ok := list[name]
		switch {
		case !strings.HasPrefix(a, "-"):
			p.refusef(v, key, "%q is not a flag; %s accepts only %s", a, key, allowed)
			continue
		case !ok:
			p.refusef(v, key, "%q is not on the allow-list (%s); %s accepts only %s", name, why, key, allowed)
			continue
		case f.value && !hasVal:
			if i+1 >= len(args) {
				p.addf(v, key, "%q needs a value; write %q", a, f.long+"=VALUE")
				continue
			}
			i++
			val = args[i]
		case !f.value && hasVal:
			p.addf(v, key, "%q takes no value; write %q", a, f.long)
			continue
		}
		if f.long == "--label" && strings.HasPrefix(val, "dev.aileron.") {
			p.refusef(v, key, "label %q is reserved: launch finds its containers and images by dev.aileron.* labels; use another prefix", val)
			continue
		}
		if f.value {
			out = append(out, f.long+"="+val)
		} else {
			out = append(out, f.long)
		}
	}
	return out
}

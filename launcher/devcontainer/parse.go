package devcontainer

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/tailscale/hujson"
)

// Mediation selects how shell commands inside the sandbox are mediated. The
// setting is declared now so the config surface exists before shell
// mediation lands; "default" is the only accepted value.
type Mediation string

// Mediation values accepted in customizations.aileron.mediation.
const (
	MediationDefault Mediation = "default"
)

// String returns the value as written in devcontainer.json.
func (m Mediation) String() string { return string(m) }

// ApprovalSurface selects where approval requests are surfaced: the control
// API, the CLI, or both.
type ApprovalSurface string

// ApprovalSurface values accepted in customizations.aileron.approval_surface.
const (
	ApprovalSurfaceAPI  ApprovalSurface = "api"
	ApprovalSurfaceCLI  ApprovalSurface = "cli"
	ApprovalSurfaceBoth ApprovalSurface = "both"
)

// String returns the value as written in devcontainer.json.
func (s ApprovalSurface) String() string { return string(s) }

// The accepted values, in the order error messages list them.
func acceptedMediation() []string { return []string{string(MediationDefault)} }

func AcceptedApprovalSurface() []string {
	return []string{string(ApprovalSurfaceAPI), string(ApprovalSurfaceCLI), string(ApprovalSurfaceBoth)}
}

func acceptedAileronKeys() []string { return []string{"approval_surface", "image", "mediation"} }

// DevContainer is the part of a devcontainer.json that aileron-proxy reads.
// It is file schema only: NewPlan turns it into a Plan.
type DevContainer struct {
	// Path is the file the settings were read from, as given to the parser.
	Path string
	// Image is the top-level "image": used as is when there is no build.
	Image string
	// Build is "build" (or the legacy top-level "dockerFile"/"context");
	// nil when the file declares no Dockerfile.
	Build *Build
	// ContainerEnv is "containerEnv", applied to the sandbox at launch; nil
	// when absent.
	ContainerEnv map[string]string
	// RemoteEnv is "remoteEnv", applied after ContainerEnv (values may use
	// ${containerEnv:VAR}); a null value is dropped. Nil when absent.
	RemoteEnv map[string]string
	// Mounts is "mounts"; WorkspaceMount is "workspaceMount" (nil when
	// absent) and WorkspaceFolder "workspaceFolder". Variables unresolved.
	Mounts          []MountSpec
	WorkspaceMount  *MountSpec
	WorkspaceFolder string
	// Lifecycle are the in-sandbox lifecycle commands in the order they
	// run (onCreateCommand, updateContentCommand, postCreateCommand,
	// postStartCommand); InitializeCommand runs on the host (nil when
	// absent). Variables unresolved.
	Lifecycle         []LifecycleStep
	InitializeCommand *LifecycleStep
	// Features is "features", in the file's order, and
	// OverrideFeatureInstallOrder "overrideFeatureInstallOrder".
	Features                    []FeatureRef
	OverrideFeatureInstallOrder []string
	// Aileron is "customizations.aileron"; zero when absent.
	Aileron AileronSettings
	// RemoteUser and ContainerUser are "remoteUser" and "containerUser":
	// the image user the agent runs as (remoteUser wins); empty means the
	// image's USER.
	RemoteUser, ContainerUser string
	// UpdateRemoteUserUID is "updateRemoteUserUID"; nil when absent (which
	// means true, as in the devcontainer CLI on Linux).
	UpdateRemoteUserUID *bool
	// RunArgs are the accepted "runArgs", each as --flag or --flag=value
	// (see AllowedRunArgs); nil when none.
	RunArgs []string
	// Refused lists the settings the sandbox refuses (privileged, capAdd,
	// runArgs off the allow-list, ...), each naming its key and why. A
	// plan carrying them is shown but never run.
	Refused []ConfigProblem
	// Ignored lists top-level and build keys that are valid devcontainer
	// settings but that aileron-proxy does not apply (features, mounts, ...),
	// sorted, for warnings.
	Ignored []string
}

// DevContainerBuild is the devcontainer "build" object. Paths are as written,
// relative to the directory holding devcontainer.json.
type Build struct {
	// Dockerfile is "build.dockerfile" (or legacy "dockerFile"); never empty.
	Dockerfile string
	// Context is "build.context" (or legacy "context"); empty means ".".
	Context string
	// Args is "build.args", passed as --build-arg; nil when absent.
	Args map[string]string
	// Target is "build.target", the stage to build; empty means the last.
	Target string
	// CacheFrom is "build.cacheFrom" (a string or an array of images).
	CacheFrom []string
	// Options are the accepted "build.options" (see allowedBuildOptions).
	Options []string
}

// AileronSettings is "customizations.aileron".
type AileronSettings struct {
	// Image selects Tier 2: a bring-your-own image used as supplied.
	Image string
	// Mediation is empty when unset (NewPlan applies MediationDefault).
	Mediation Mediation
	// ApprovalSurface is empty when unset (NewPlan applies ApprovalSurfaceBoth).
	ApprovalSurface ApprovalSurface
}

// ConfigProblem is one error in a devcontainer.json, located in the file.
type ConfigProblem struct {
	// Line and Column are 1-based; zero when the problem has no location.
	Line   int `json:"line,omitempty"`
	Column int `json:"column,omitempty"`
	// Key is the dotted key path, e.g. "customizations.aileron.mediation".
	Key string `json:"key"`
	// Message says what is wrong and what to write instead.
	Message string `json:"message"`
}

// ConfigError lists every problem found in one devcontainer.json.
type ConfigError struct {
	// Path is the file, as given to the parser.
	Path     string
	Problems []ConfigProblem
}

// Error lists the problems one per line as "file:line:col: key: message".
func (e *ConfigError) Error() string {
	lines := make([]string, 0, len(e.Problems))
	for _, p := range e.Problems {
		loc := e.Path
		if p.Line > 0 {
			loc = fmt.Sprintf("%s:%d:%d", e.Path, p.Line, p.Column)
		}
		if p.Key != "" {
			lines = append(lines, fmt.Sprintf("%s: %s: %s", loc, p.Key, p.Message))
		} else {
			lines = append(lines, fmt.Sprintf("%s: %s", loc, p.Message))
		}
	}
	return strings.Join(lines, "\n")
}

// isIgnoredTopLevel reports whether name is a devcontainer key that is valid
// but not applied by aileron-proxy; it produces a warning, not an error.
func isIgnoredTopLevel(name string) bool {
	switch name {
	case "postAttachCommand",
		"service", "overrideCommand", "shutdownAction",
		"userEnvProbe", "hostRequirements", "portsAttributes", "otherPortsAttributes", "waitFor":
		return true
	}
	return false
}

// ParseDevContainer parses devcontainer.json bytes (JSONC: comments and
// trailing commas allowed). path is used in error messages only. A syntax
// error names the line and column; bad values are reported together as a
// *ConfigError naming each key and what it accepts.
func Parse(path string, data []byte) (*DevContainer, error) {
	root, err := hujson.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w (devcontainer.json is JSON with comments; fix the syntax there)", path, err)
	}
	p := &dcParser{data: data, dc: &DevContainer{Path: path}}
	p.parse(&root)
	if len(p.problems) > 0 {
		return nil, &ConfigError{Path: path, Problems: p.problems}
	}
	sort.Strings(p.dc.Ignored)
	sort.SliceStable(p.dc.Lifecycle, func(i, j int) bool {
		return slices.Index(LifecycleKeys, p.dc.Lifecycle[i].Key) < slices.Index(LifecycleKeys, p.dc.Lifecycle[j].Key)
	})
	return p.dc, nil
}

type dcParser struct {
	data     []byte
	dc       *DevContainer
	problems []ConfigProblem
}

func (p *dcParser) addf(v *hujson.Value, key, format string, args ...any) {
	line, col := 0, 0
	if v != nil {
		line, col = LineColumn(p.data, v.StartOffset)
	}
	p.problems = append(p.problems, ConfigProblem{Line: line, Column: col, Key: key, Message: fmt.Sprintf(format, args...)})
}

// lineColumn converts a byte offset into a 1-based line and column.
func LineColumn(b []byte, n int) (line, col int) {
	if n > len(b) {
		n = len(b)
	}
	line = 1 + bytes.Count(b[:n], []byte("\n"))
	col = 1 + n - (bytes.LastIndexByte(b[:n], '\n') + 1)
	return line, col
}

// member is one object member with its name and value nodes.
type member struct {
	name  string
	nameV *hujson.Value
	value *hujson.Value
}

func objectMembers(v *hujson.Value) ([]member, bool) {
	obj, ok := v.Value.(*hujson.Object)
	if !ok {
		return nil, false
	}
	out := make([]member, 0, len(obj.Members))
	for i := range obj.Members {
		m := &obj.Members[i]
		name := ""
		if lit, ok := m.Name.Value.(hujson.Literal); ok {
			name = lit.String()
		}
		out = append(out, member{name: name, nameV: &m.Name, value: &m.Value})
	}
	return out, true
}

// object returns v's members; when v is not an object it records that key
// must be want instead.
func (p *dcParser) object(v *hujson.Value, key, want string) ([]member, bool) {
	members, ok := objectMembers(v)
	if !ok {
		p.addf(v, key, "must be %s, not %s", want, kindName(v))
	}
	return members, ok
}

func kindName(v *hujson.Value) string {
	switch v.Value.Kind() {
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	case '"':
		return "a string"
	case '0':
		return "a number"
	case '{':
		return "an object"
	case '[':
		return "an array"
	}
	return "an unknown value"
}

// str reads a string value; ok is false (and a problem recorded) otherwise.
func (p *dcParser) str(v *hujson.Value, key string, allowEmpty bool) (string, bool) {
	lit, isLit := v.Value.(hujson.Literal)
	if !isLit || lit.Kind() != '"' {
		p.addf(v, key, "must be a string, not %s", kindName(v))
		return "", false
	}
	s := lit.String()
	if !allowEmpty && strings.TrimSpace(s) == "" {
		p.addf(v, key, "must not be empty; remove the key or give a value")
		return "", false
	}
	return s, true
}

// oneOf reads a string value that must be one of accepted; ok is false (and
// a problem recorded) otherwise.
func (p *dcParser) oneOf(v *hujson.Value, key string, accepted []string) (string, bool) {
	s, ok := p.str(v, key, false)
	if ok && !slices.Contains(accepted, s) {
		p.addf(v, key, "unsupported value %q; use one of %s", s, quoteList(accepted))
		return "", false
	}
	return s, ok
}

func (p *dcParser) stringMap(v *hujson.Value, key string) map[string]string {
	members, ok := p.object(v, key, "an object of string values")
	if !ok {
		return nil
	}
	out := make(map[string]string, len(members))
	for _, m := range members {
		k := key + "." + m.name
		if m.name == "" {
			p.addf(m.nameV, key, "has an empty name; remove it")
			continue
		}
		if s, ok := p.str(m.value, k, true); ok {
			out[m.name] = s
		}
	}
	return out
}

// parse reads every top-level member of root into p.dc. It is long
// because it is the one switch over the keys of devcontainer.json: each
// case says how a key is read, refused or ignored, side by side.
func (p *dcParser) parse(root *hujson.Value) {
	members, ok := objectMembers(root)
	if !ok {
		p.addf(root, "", "the top level must be an object, not %s", kindName(root))
		return
	}
	var legacyDockerfile, legacyContext string
	var legacyV *hujson.Value
	for _, m := range members {
		switch m.name {
		case "image":
			if s, ok := p.str(m.value, "image", false); ok {
				p.dc.Image = s
			}
		case "build":
			p.parseBuild(m.value)
		case "dockerFile":
			legacyV = m.value
			if s, ok := p.str(m.value, "dockerFile", false); ok {
				legacyDockerfile = s
			}
		case "context":
			if s, ok := p.str(m.value, "context", false); ok {
				legacyContext = s
			}
		case "containerEnv":
			p.dc.ContainerEnv = p.stringMap(m.value, "containerEnv")
		case "features":
			p.parseFeatures(m.value)
		case "overrideFeatureInstallOrder":
			p.dc.OverrideFeatureInstallOrder = p.strings(m.value, m.name)
		case "mounts":
			p.dc.Mounts = p.parseMounts(m.value)
		case "workspaceMount":
			if wm, ok := p.parseMount(m.value, "workspaceMount"); ok {
				p.dc.WorkspaceMount = &wm
			}
		case "workspaceFolder":
			p.dc.WorkspaceFolder, _ = p.str(m.value, "workspaceFolder", false)
		case "onCreateCommand", "updateContentCommand", "postCreateCommand", "postStartCommand":
			if step, ok := p.parseLifecycle(m.value, m.name); ok {
				p.dc.Lifecycle = append(p.dc.Lifecycle, step)
			}
		case "initializeCommand":
			if step, ok := p.parseLifecycle(m.value, m.name); ok {
				p.dc.InitializeCommand = &step
			}
		case "remoteEnv":
			p.dc.RemoteEnv = p.stringMap(dropNulls(m.value), "remoteEnv")
		case "customizations":
			p.parseCustomizations(m.value)
		case "remoteUser":
			p.dc.RemoteUser, _ = p.str(m.value, "remoteUser", false)
		case "containerUser":
			p.dc.ContainerUser, _ = p.str(m.value, "containerUser", false)
		case "updateRemoteUserUID":
			lit, isLit := m.value.Value.(hujson.Literal)
			if !isLit || (lit.Kind() != 't' && lit.Kind() != 'f') {
				p.addf(m.value, "updateRemoteUserUID", "must be true or false, not %s", kindName(m.value))
				break
			}
			b := lit.Kind() == 't'
			p.dc.UpdateRemoteUserUID = &b
		default:
			if !p.parseRefusable(m) && isIgnoredTopLevel(m.name) {
				p.dc.Ignored = append(p.dc.Ignored, m.name)
			}
		}
	}
	switch {
	case legacyDockerfile != "" && p.dc.Build != nil:
		p.addf(legacyV, "dockerFile", "conflicts with build.dockerfile; keep only build.dockerfile")
	case legacyDockerfile != "":
		p.dc.Build = &Build{Dockerfile: legacyDockerfile, Context: legacyContext}
	}
}

func (p *dcParser) parseBuild(v *hujson.Value) {
	members, ok := p.object(v, "build", `an object with a "dockerfile"`)
	if !ok {
		return
	}
	b := &Build{}
	sawDockerfile := false
	for _, m := range members {
		key := "build." + m.name
		switch m.name {
		case "dockerfile", "dockerFile":
			sawDockerfile = true
			if s, ok := p.str(m.value, key, false); ok {
				b.Dockerfile = s
			}
		case "context":
			if s, ok := p.str(m.value, key, false); ok {
				b.Context = s
			}
		case "args":
			b.Args = p.stringMap(m.value, key)
		case "target":
			b.Target, _ = p.str(m.value, key, false)
		case "cacheFrom":
			if _, isArr := m.value.Value.(*hujson.Array); isArr {
				b.CacheFrom = p.strings(m.value, key)
			} else if s, ok := p.str(m.value, key, false); ok {
				b.CacheFrom = []string{s}
			}
		case "options":
			b.Options = p.allowedFlags(m.value, key, allowedBuildOptions, "the build could reach host files, credentials or networks")
		default:
			p.dc.Ignored = append(p.dc.Ignored, key)
		}
	}
	if b.Dockerfile == "" {
		// A dockerfile key with a bad value has its own problem already.
		if !sawDockerfile {
			p.addf(v, "build.dockerfile", "is required when build is set; use \"Dockerfile\" (relative to .devcontainer/) or remove build and set image")
		}
		return
	}
	p.dc.Build = b
}

func (p *dcParser) parseCustomizations(v *hujson.Value) {
	members, ok := p.object(v, "customizations", "an object")
	if !ok {
		return
	}
	for _, m := range members {
		if m.name == "aileron" {
			p.parseAileron(m.value)
		}
	}
}

func (p *dcParser) parseAileron(v *hujson.Value) {
	const prefix = "customizations.aileron"
	members, ok := p.object(v, prefix, "an object with keys "+quoteList(acceptedAileronKeys()))
	if !ok {
		return
	}
	a := &p.dc.Aileron
	for _, m := range members {
		key := prefix + "." + m.name
		switch m.name {
		case "image":
			if s, ok := p.str(m.value, key, false); ok {
				a.Image = s
			}
		case "mediation":
			if s, ok := p.oneOf(m.value, key, acceptedMediation()); ok {
				a.Mediation = Mediation(s)
			}
		case "approval_surface":
			if s, ok := p.oneOf(m.value, key, AcceptedApprovalSurface()); ok {
				a.ApprovalSurface = ApprovalSurface(s)
			}
		default:
			p.addf(m.nameV, key, "unknown key; customizations.aileron accepts %s", quoteList(acceptedAileronKeys()))
		}
	}
}

func quoteList(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// DevContainerPath is where a project's devcontainer.json lives, relative to
// the project directory.
const Path = ".devcontainer/devcontainer.json"

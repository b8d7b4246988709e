package launcher

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/aileron-dev/aileron-proxy/launcher/devcontainer"
	"github.com/aileron-dev/aileron-proxy/launcher/guard"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Tier is how the sandbox image is composed. The zero value is TierUnset,
// which no plan carries: an unplanned sandbox is never run.
type Tier int

// Tiers, in the order of the composition ADR.
const (
	TierUnset        Tier = iota // not planned
	TierBase                     // tier 0: no devcontainer, aileron/sandbox-base
	TierDevcontainer             // tier 1: the devcontainer's Dockerfile or image
	TierImage                    // tier 2: customizations.aileron.image, as supplied
)

// Number is the tier number of the ADR (0, 1 or 2), or -1 for TierUnset.
func (t Tier) Number() int {
	switch t {
	case TierBase:
		return 0
	case TierDevcontainer:
		return 1
	case TierImage:
		return 2
	}
	return -1
}

// Name is the short name: "base", "devcontainer", "image" or "unset".
func (t Tier) Name() string {
	switch t {
	case TierBase:
		return "base"
	case TierDevcontainer:
		return "devcontainer"
	case TierImage:
		return "image"
	}
	return "unset"
}

// String is e.g. "1 (devcontainer)".
func (t Tier) String() string { return fmt.Sprintf("%d (%s)", t.Number(), t.Name()) }

// PlanOptions adjusts NewPlan.
type PlanOptions struct {
	// BaseVersion is the sandbox-base tag; empty means BaseVersion.
	BaseVersion string
	// LocalEnv resolves ${localEnv:VAR} in build.args and feature
	// options; nil means os.LookupEnv (the environment of the launching
	// process).
	LocalEnv func(string) (string, bool)
	// AileronHome is $AILERON_HOME, which no mount may expose; empty means
	// $AILERON_HOME, else ~/.aileron.
	AileronHome string
	// MountRules overrides DefaultMountRules(AileronHome) (tests).
	MountRules *devcontainer.MountRules
	// FeatureFetcher fetches OCI features; nil means
	// NewOCIFeatureFetcher("") (the default cache directory).
	FeatureFetcher devcontainer.FeatureFetcher
}

// Plan is the normalized composition of one project's sandbox: which image
// runs, and how it is built. It is computed by NewPlan and not mutated.
type Plan struct {
	// ProjectDir is the absolute project directory.
	ProjectDir string `json:"project_dir"`
	// Tier is never TierUnset in a plan returned by NewPlan.
	Tier Tier `json:"-"`
	// Image is the reference the sandbox runs.
	Image string `json:"image"`
	// BaseImage is aileron/sandbox-base:<version> for this binary.
	BaseImage string `json:"base_image"`
	// Build is how Image is built; nil when Image is used as is (Tier 2, or
	// a devcontainer "image" without "build").
	Build *BuildSpec `json:"build,omitempty"`
	// DevContainer is the absolute path of devcontainer.json; empty in Tier 0.
	DevContainer string `json:"devcontainer,omitempty"`
	// ContainerEnv and RemoteEnv are the devcontainer's containerEnv and
	// remoteEnv as written (variables unresolved: ResolveEnv resolves them
	// at launch); nil when none.
	ContainerEnv map[string]string `json:"container_env,omitempty"`
	RemoteEnv    map[string]string `json:"remote_env,omitempty"`
	// Workspace is the project's mount (devcontainer workspaceMount;
	// default ProjectDir at WorkspacePath) and WorkspaceFolder the
	// agent's working directory (workspaceFolder; default Workspace's
	// target).
	Workspace       runtime.Mount `json:"workspace"`
	WorkspaceFolder string        `json:"workspace_folder"`
	// Mounts are the devcontainer's mounts, resolved and checked
	// (MountRules); nil when none.
	Mounts []runtime.Mount `json:"mounts,omitempty"`
	// Features are the devcontainer's features, resolved, in install
	// order; FeaturesImage is the derived image installing them on Image
	// (see RunImage). Empty when none.
	Features      []*devcontainer.Feature `json:"features,omitempty"`
	FeaturesImage string                  `json:"features_image,omitempty"`
	// Lifecycle are the devcontainer's in-sandbox lifecycle commands, in
	// the order they run before the agent; InitializeCommand runs on the
	// host, only when launch is given --allow-host-commands. As written.
	Lifecycle         []devcontainer.LifecycleStep `json:"lifecycle,omitempty"`
	InitializeCommand *devcontainer.LifecycleStep  `json:"initialize_command,omitempty"`
	// DevContainerID is ${devcontainerId}; empty in Tier 0.
	DevContainerID string `json:"devcontainer_id,omitempty"`
	// User is the image user the agent runs as (devcontainer remoteUser,
	// else containerUser); empty means the image's USER.
	User string `json:"user,omitempty"`
	// ContainerUser is the devcontainer's containerUser (features see it
	// as _CONTAINER_USER); empty when unset.
	ContainerUser string `json:"container_user,omitempty"`
	// UpdateRemoteUserUID remaps User's uid/gid to the project owner's
	// (devcontainer updateRemoteUserUID; default true).
	UpdateRemoteUserUID bool `json:"update_remote_user_uid"`
	// Mediation and ApprovalSurface are the customizations.aileron settings
	// with defaults applied.
	Mediation       devcontainer.Mediation       `json:"mediation"`
	ApprovalSurface devcontainer.ApprovalSurface `json:"approval_surface"`
	// RunArgs are the devcontainer's accepted runArgs (and "init"),
	// appended to the agent's run; nil when none.
	RunArgs []string `json:"run_args,omitempty"`
	// Refused are the devcontainer settings the sandbox refuses; a plan
	// with any is shown by `sandbox plan` but Refusal stops everything else.
	Refused []devcontainer.ConfigProblem `json:"refused,omitempty"`
	// Warnings are survivable oddities (ignored keys, a stale FROM), sorted.
	Warnings []string `json:"warnings,omitempty"`
}

// BuildSpec says how a plan's image is built.
type BuildSpec struct {
	// Embedded is true for the sandbox-base definition compiled into this
	// binary; Dockerfile and Context are then empty.
	Embedded bool `json:"embedded"`
	// Dockerfile and Context are absolute paths.
	Dockerfile string `json:"dockerfile,omitempty"`
	Context    string `json:"context,omitempty"`
	// Args are passed as --build-arg; nil when none.
	Args map[string]string `json:"args,omitempty"`
	// Target, CacheFrom and Options are devcontainer build.target,
	// build.cacheFrom and the accepted build.options.
	Target    string   `json:"target,omitempty"`
	CacheFrom []string `json:"cache_from,omitempty"`
	Options   []string `json:"options,omitempty"`
	// ExtendsBase is true when a FROM names BaseImage, which is then built
	// (or checked) first.
	ExtendsBase bool `json:"extends_base"`
	// Digest is "sha256:<hex>" over the definition (Dockerfile bytes, args,
	// context path); Tier 1 tags carry its first 12 hex digits so a changed
	// Dockerfile gets a new tag.
	Digest string `json:"definition_digest"`
}

// MarshalJSON adds "tier" (the number) and "tier_name".
func (p *Plan) MarshalJSON() ([]byte, error) { return json.Marshal(planJSON(p, nil)) }

type plainPlan Plan

type planView struct {
	Tier     int    `json:"tier"`
	TierName string `json:"tier_name"`
	*plainPlan
	// EgressGuard and Hardening say how launch confines the sandbox.
	EgressGuard string       `json:"egress_guard"`
	Hardening   string       `json:"hardening"`
	Runtime     *RuntimeInfo `json:"runtime,omitempty"`
}

func planJSON(p *Plan, rt *RuntimeInfo) planView {
	return planView{Tier: p.Tier.Number(), TierName: p.Tier.Name(), plainPlan: (*plainPlan)(p),
		EgressGuard: guard.Summary(nil), Hardening: hardeningSummary(p), Runtime: rt}
}

// NewPlan reads projectDir/.devcontainer/devcontainer.json (when present)
// and returns the sandbox plan. It reads files but runs nothing.
func NewPlan(projectDir string, opts PlanOptions) (*Plan, error) {
	abs, err := filepath.Abs(projectDir)
	if err != nil {
		return nil, fmt.Errorf("resolving project directory %q: %w", projectDir, err)
	}
	if st, err := os.Stat(abs); err != nil {
		return nil, fmt.Errorf("reading project directory: %w (pass an existing directory with --project)", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("reading project directory %q: not a directory (pass a directory with --project)", abs)
	}
	p := &Plan{
		ProjectDir:          abs,
		BaseImage:           BaseImage(opts.BaseVersion),
		Mediation:           devcontainer.MediationDefault,
		ApprovalSurface:     devcontainer.ApprovalSurfaceBoth,
		UpdateRemoteUserUID: true,
		Workspace:           runtime.Mount{Source: abs, Target: WorkspacePath},
		WorkspaceFolder:     WorkspacePath,
	}
	dcPath := filepath.Join(abs, filepath.FromSlash(devcontainer.Path))
	data, err := os.ReadFile(dcPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if _, err := os.Stat(filepath.Join(abs, ".devcontainer.json")); err == nil {
			p.warnf("%s is not read; aileron-proxy reads %s only: move it there", ".devcontainer.json", devcontainer.Path)
		}
		p.Tier = TierBase
		p.Image = p.BaseImage
		p.Build = &BuildSpec{Embedded: true, Digest: BaseDefinitionDigest()}
		return p, nil
	case err != nil:
		return nil, fmt.Errorf("reading %s: %w", dcPath, err)
	}
	dc, err := devcontainer.Parse(dcPath, data)
	if err != nil {
		return nil, err
	}
	p.DevContainer = dcPath
	p.ContainerEnv, p.RemoteEnv = dc.ContainerEnv, dc.RemoteEnv
	p.DevContainerID = devcontainer.ID(abs, dcPath)
	p.Lifecycle, p.InitializeCommand = dc.Lifecycle, dc.InitializeCommand
	if err := p.planMounts(dc, opts); err != nil {
		return nil, err
	}
	if dc.Build != nil {
		dc.Build.Args = devcontainer.SubstituteMap(dc.Build.Args, p.Vars(opts.LocalEnv, nil))
	}
	// runArgs are used as written: they were checked against the allow-list
	// (and the reserved dev.aileron.* labels) as written, and they reach the
	// runtime's argv, where no ${localEnv:...} value belongs.
	p.RunArgs, p.Refused = dc.RunArgs, append(p.Refused, dc.Refused...)
	p.User, p.ContainerUser = dc.RemoteUser, dc.ContainerUser
	if p.User == "" {
		p.User = dc.ContainerUser
	}
	if dc.UpdateRemoteUserUID != nil {
		p.UpdateRemoteUserUID = *dc.UpdateRemoteUserUID
	}
	if dc.Aileron.Mediation != "" {
		p.Mediation = dc.Aileron.Mediation
	}
	if dc.Aileron.ApprovalSurface != "" {
		p.ApprovalSurface = dc.Aileron.ApprovalSurface
	}
	if len(dc.Ignored) > 0 {
		p.warnf("%s: ignoring %s: aileron-proxy does not apply them (docs/launcher.md lists every key)", devcontainer.Path, strings.Join(dc.Ignored, ", "))
	}
	switch {
	case dc.Aileron.Image != "":
		p.Tier = TierImage
		p.Image = dc.Aileron.Image
		if dc.Build != nil || dc.Image != "" {
			p.warnf("%s: customizations.aileron.image selects the image; build and image are ignored", devcontainer.Path)
		}
	case dc.Build != nil:
		p.Tier = TierDevcontainer
		if dc.Image != "" {
			p.warnf("%s: build is set, so image %q is ignored", devcontainer.Path, dc.Image)
		}
		if err := p.planBuild(filepath.Dir(dcPath), dc.Build); err != nil {
			return nil, err
		}
	case dc.Image != "":
		p.Tier = TierDevcontainer
		p.Image = dc.Image
	default:
		return nil, fmt.Errorf("planning from %s: set build.dockerfile or image (run `aileron-proxy sandbox init --force` for the starter), or delete the file to use %s", dcPath, p.BaseImage)
	}
	if err := p.planFeatures(filepath.Dir(dcPath), dc, opts); err != nil {
		return nil, err
	}
	sort.Strings(p.Warnings)
	sort.SliceStable(p.Refused, func(i, j int) bool { return p.Refused[i].Line < p.Refused[j].Line })
	return p, nil
}

func (p *Plan) warnf(format string, args ...any) {
	p.Warnings = append(p.Warnings, fmt.Sprintf(format, args...))
}

func (p *Plan) planBuild(dcDir string, b *devcontainer.Build) error {
	dockerfile := resolveIn(dcDir, b.Dockerfile)
	context := resolveIn(dcDir, b.Context)
	df, err := os.ReadFile(dockerfile)
	if err != nil {
		return fmt.Errorf("reading the Dockerfile build.dockerfile names: %w (create it, fix the path in %s, or run `aileron-proxy sandbox init --force`)", err, devcontainer.Path)
	}
	if st, err := os.Stat(context); err != nil || !st.IsDir() {
		return fmt.Errorf("checking build.context %q: %s is not a directory (it is relative to .devcontainer/; fix it in %s)", b.Context, context, devcontainer.Path)
	}
	spec := &BuildSpec{Dockerfile: dockerfile, Context: context, Args: b.Args, Target: b.Target, CacheFrom: b.CacheFrom, Options: b.Options}
	for _, from := range dockerfileFroms(df, b.Args) {
		switch {
		case sameImage(from, p.BaseImage):
			spec.ExtendsBase = true
		case strings.HasPrefix(normalizeRef(from), BaseRepository+":"):
			p.warnf("%s extends %s but this binary builds %s; change FROM to %s", relTo(p.ProjectDir, dockerfile), from, p.BaseImage, p.BaseImage)
		}
	}
	h := sha256.New()
	fmt.Fprintf(h, "context=%s\nbase=%s\n", context, p.BaseImage)
	for _, k := range sortedKeys(b.Args) {
		fmt.Fprintf(h, "arg %q=%q\n", k, b.Args[k])
	}
	if b.Target != "" {
		fmt.Fprintf(h, "target=%q\n", b.Target)
	}
	h.Write(df)
	sum := hex.EncodeToString(h.Sum(nil))
	spec.Digest = "sha256:" + sum
	p.Build = spec
	p.Image = fmt.Sprintf("aileron/sandbox-%s:%s", imageSlug(p.ProjectDir), sum[:12])
	return nil
}

// resolveIn resolves a devcontainer path (relative to dir unless absolute).
func resolveIn(dir, path string) string {
	if path == "" {
		path = "."
	}
	if filepath.IsAbs(path) {
		return filepath.Clean(path)
	}
	return filepath.Join(dir, filepath.FromSlash(path))
}

// relTo returns path relative to base when it is inside base, else path.
func relTo(base, path string) string {
	rel, err := filepath.Rel(base, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return path
	}
	return filepath.ToSlash(rel)
}

// imageSlug turns a project directory into a repository-safe name part.
func imageSlug(dir string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(filepath.Base(dir)) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			if s := b.String(); s != "" && !strings.HasSuffix(s, "-") {
				b.WriteByte('-')
			}
		}
	}
	s := strings.Trim(b.String(), "-")
	if len(s) > 40 {
		s = strings.Trim(s[:40], "-")
	}
	if s == "" {
		s = "project"
	}
	return s
}

// dockerfileFroms returns the image of every FROM instruction, with ARG
// defaults declared before the first FROM and the build args substituted.
// Stage names (FROM a AS b, then FROM b) are not returned.
func dockerfileFroms(df []byte, buildArgs map[string]string) []string {
	args := map[string]string{}
	stages := map[string]bool{}
	var froms []string
	seenFrom := false
	for _, line := range logicalLines(string(df)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		switch strings.ToUpper(fields[0]) {
		case "ARG":
			if seenFrom {
				continue
			}
			for _, f := range fields[1:] {
				name, def, _ := strings.Cut(f, "=")
				args[name] = strings.Trim(def, `"'`)
			}
		case "FROM":
			seenFrom = true
			rest := fields[1:]
			for len(rest) > 0 && strings.HasPrefix(rest[0], "--") {
				rest = rest[1:]
			}
			if len(rest) == 0 {
				continue
			}
			image := expandArgs(rest[0], args, buildArgs)
			if !stages[strings.ToLower(image)] {
				froms = append(froms, image)
			}
			if len(rest) >= 3 && strings.EqualFold(rest[1], "AS") {
				stages[strings.ToLower(rest[2])] = true
			}
		}
	}
	return froms
}

// logicalLines joins backslash continuations and drops comment lines.
func logicalLines(s string) []string {
	var out []string
	var cur strings.Builder
	for _, raw := range strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n") {
		t := strings.TrimSpace(raw)
		if strings.HasPrefix(t, "#") {
			continue
		}
		if strings.HasSuffix(t, `\`) {
			cur.WriteString(strings.TrimSuffix(t, `\`))
			cur.WriteByte(' ')
			continue
		}
		cur.WriteString(t)
		out = append(out, cur.String())
		cur.Reset()
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// expandArgs substitutes $NAME, ${NAME}, ${NAME:-default} and ${NAME:+alt};
// build args win over ARG defaults.
func expandArgs(s string, defaults, overrides map[string]string) string {
	lookup := func(name string) (string, bool) {
		if v, ok := overrides[name]; ok {
			return v, true
		}
		v, ok := defaults[name]
		return v, ok
	}
	return os.Expand(s, func(expr string) string {
		if name, def, ok := strings.Cut(expr, ":-"); ok {
			if v, ok := lookup(name); ok && v != "" {
				return v
			}
			return def
		}
		if name, alt, ok := strings.Cut(expr, ":+"); ok {
			if v, ok := lookup(name); ok && v != "" {
				return alt
			}
			return ""
		}
		v, _ := lookup(expr)
		return v
	})
}

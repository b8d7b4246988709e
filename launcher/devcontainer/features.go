package devcontainer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/tailscale/hujson"
)

// DevContainerFeature is one "features" entry as written.
type FeatureRef struct {
	// Ref is the key: an OCI reference (registry/path/name:tag) or a
	// local "./path" relative to .devcontainer/.
	Ref string
	// Options are the entry's options (a string value is "version").
	Options map[string]string
	// Line and Column locate the entry.
	Line, Column int
}

// parseFeatures reads "features": {ref: {option: value} | "version" | true}.
func (p *dcParser) parseFeatures(v *hujson.Value) {
	members, ok := p.object(v, "features", "an object of feature references")
	if !ok {
		return
	}
	for _, m := range members {
		key := "features." + m.name
		f := FeatureRef{Ref: m.name, Options: map[string]string{}}
		f.Line, f.Column = LineColumn(p.data, m.nameV.StartOffset)
		switch x := m.value.Value.(type) {
		case *hujson.Object:
			opts, _ := objectMembers(m.value)
			for _, o := range opts {
				lit, isLit := o.value.Value.(hujson.Literal)
				if !isLit || lit.Kind() == 'n' {
					p.addf(o.value, key+"."+o.name, "must be a string, boolean or number, not %s", kindName(o.value))
					continue
				}
				if lit.Kind() == '"' {
					f.Options[o.name] = lit.String()
				} else {
					f.Options[o.name] = string(lit)
				}
			}
		case hujson.Literal:
			switch x.Kind() {
			case '"':
				f.Options["version"] = x.String()
			case 't':
			case 'f':
				continue // false disables the feature
			default:
				p.addf(m.value, key, "must be an object of options, a version string or true, not %s", kindName(m.value))
				continue
			}
		default:
			p.addf(m.value, key, "must be an object of options, a version string or true, not %s", kindName(m.value))
			continue
		}
		p.dc.Features = append(p.dc.Features, f)
	}
}

// Feature is a resolved devcontainer feature, ready to install.
type Feature struct {
	// ID is the reference without its tag or digest (how dependsOn,
	// installsAfter and overrideFeatureInstallOrder name it).
	ID string `json:"id"`
	// Ref is the reference as written (or as a dependsOn named it).
	Ref string `json:"ref"`
	// Digest is "sha256:<hex>": the OCI manifest's, or the local
	// directory's content digest.
	Digest string `json:"digest"`
	// Env is the install environment: each option (defaults from
	// devcontainer-feature.json, then the entry's) under its env name, as
	// written.
	Env map[string]string `json:"options,omitempty"`
	// InstallEnv is Env with devcontainer variables (${localEnv:VAR},
	// ${localWorkspaceFolder}...) resolved, as the devcontainer CLI does
	// for the whole file: what install.sh gets. Plan output prints Env,
	// but the values are in the features image (its env file's layer, and
	// its tag's digest), as build args are: never a place for a secret.
	InstallEnv map[string]string `json:"-"`
	// ContainerEnv is the feature's containerEnv, set in the image.
	ContainerEnv map[string]string `json:"container_env,omitempty"`
	// Dir is the feature's directory on the host (install.sh inside).
	Dir string `json:"-"`
	// DependedOn is true for a feature installed only because another
	// dependsOn it.
	DependedOn bool `json:"depended_on,omitempty"`

	// DependsOn and InstallsAfter are the feature IDs it must be
	// installed after (its metadata's dependsOn, then installsAfter).
	DependsOn, InstallsAfter []string `json:"-"`
}

// featureMeta is devcontainer-feature.json, the parts read.
type featureMeta struct {
	ID      string `json:"id"`
	Options map[string]struct {
		Default any `json:"default"`
	} `json:"options"`
	ContainerEnv  map[string]string         `json:"containerEnv"`
	DependsOn     map[string]map[string]any `json:"dependsOn"`
	InstallsAfter []string                  `json:"installsAfter"`
	Privileged    bool                      `json:"privileged"`
	Init          bool                      `json:"init"`
	CapAdd        []string                  `json:"capAdd"`
	SecurityOpt   []string                  `json:"securityOpt"`
	Mounts        []any                     `json:"mounts"`
}

// FeatureFetcher fetches an OCI feature into a directory; see
// OCIFeatureFetcher.
type FeatureFetcher interface {
	// Fetch returns the directory holding the feature's files and the
	// manifest digest.
	Fetch(ref string) (dir, digest string, err error)
}

// featureID strips the tag or digest from a reference.
func FeatureID(ref string) string {
	if isLocalFeature(ref) {
		return ref
	}
	if i := strings.Index(ref, "@"); i >= 0 {
		return ref[:i]
	}
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[:i]
	}
	return ref
}

func isLocalFeature(ref string) bool {
	return strings.HasPrefix(ref, "./") || strings.HasPrefix(ref, "../")
}

var nonWord = regexp.MustCompile(`[^\w_]`)
var leadingDigits = regexp.MustCompile(`^[\d_]+`)

// featureEnvName is an option's environment name, as the devcontainer
// CLI derives it: non-word characters become "_", a leading run of
// digits and underscores becomes one "_", upper case.
func FeatureEnvName(option string) string {
	return strings.ToUpper(leadingDigits.ReplaceAllString(nonWord.ReplaceAllString(option, "_"), "_"))
}

// ResolveFeatures resolves the declared features and their dependsOn
// (each installed once; an unlisted one with the options dependsOn gives),
// and orders them: dependsOn first, then installsAfter among the listed,
// then overrideFeatureInstallOrder, then the file's order. A feature
// asking for what the sandbox refuses is returned in refused.
//
// It is long because it is one recursive walk: a feature is fetched, read
// and checked where it is met (a dependency is refused at the line of the
// feature that declared it), then all are ordered.
func ResolveFeatures(dcDir string, declared []FeatureRef, override []string, fetch FeatureFetcher) (ordered []*Feature, refused []ConfigProblem, err error) {
	byID := map[string]*Feature{}
	var all []*Feature
	var add func(ref string, opts map[string]string, line, col int, dep bool) error
	add = func(ref string, opts map[string]string, line, col int, dep bool) error {
		id := FeatureID(ref)
		if _, ok := byID[id]; ok {
			return nil
		}
		f := &Feature{ID: id, Ref: ref, DependedOn: dep}
		if isLocalFeature(ref) {
			f.Dir = filepath.Join(dcDir, filepath.FromSlash(ref))
			if rel, err := filepath.Rel(dcDir, f.Dir); err != nil || strings.HasPrefix(rel, "..") {
				return fmt.Errorf("feature %q: a local feature must be inside .devcontainer/ (write ./NAME)", ref)
			}
			if f.Digest, err = DirDigest(f.Dir); err != nil {
				return fmt.Errorf("feature %q: %w (create the directory with devcontainer-feature.json and install.sh)", ref, err)
			}
		} else {
			if fetch == nil {
				return fmt.Errorf("feature %q: no OCI fetcher configured", ref)
			}
			if f.Dir, f.Digest, err = fetch.Fetch(ref); err != nil {
				return fmt.Errorf("fetching feature %q: %w", ref, err)
			}
		}
		raw, err := os.ReadFile(filepath.Join(f.Dir, "devcontainer-feature.json"))
		if err != nil {
			return fmt.Errorf("feature %q: reading devcontainer-feature.json: %w", ref, err)
		}
		std, err := hujson.Standardize(raw)
		var meta featureMeta
		if err == nil {
			err = json.Unmarshal(std, &meta)
		}
		if err != nil {
			return fmt.Errorf("feature %q: parsing devcontainer-feature.json: %w", ref, err)
		}
		if _, err := os.Stat(filepath.Join(f.Dir, "install.sh")); err != nil {
			return fmt.Errorf("feature %q: %w (a feature needs an install.sh)", ref, err)
		}
		refuse := func(what string) {
			refused = append(refused, ConfigProblem{Line: line, Column: col, Key: "features", Message: fmt.Sprintf("refused: feature %q asks for %s, which the sandbox never grants; remove the feature or install its tool in the Dockerfile", ref, what)})
		}
		if meta.Privileged {
			refuse("privileged")
		}
		if meta.Init {
			refuse("init")
		}
		if len(meta.CapAdd) > 0 {
			refuse("capAdd " + strings.Join(meta.CapAdd, ", "))
		}
		for _, o := range meta.SecurityOpt {
			if !isNoNewPrivileges(o) {
				refuse("securityOpt " + o)
			}
		}
		if len(meta.Mounts) > 0 {
			refuse("mounts")
		}
		f.Env = map[string]string{}
		for name, o := range meta.Options {
			if o.Default != nil {
				f.Env[FeatureEnvName(name)] = fmt.Sprint(o.Default)
			}
		}
		for name, v := range opts {
			f.Env[FeatureEnvName(name)] = v
		}
		f.ContainerEnv = meta.ContainerEnv
		f.InstallsAfter = meta.InstallsAfter
		byID[id] = f
		all = append(all, f)
		for _, depRef := range slices.Sorted(maps.Keys(meta.DependsOn)) {
			f.DependsOn = append(f.DependsOn, FeatureID(depRef))
			depOpts := map[string]string{}
			for k, v := range meta.DependsOn[depRef] {
				depOpts[k] = fmt.Sprint(v)
			}
			if err := add(depRef, depOpts, line, col, true); err != nil {
				return fmt.Errorf("feature %q depends on %q: %w", ref, depRef, err)
			}
		}
		return nil
	}
	for _, d := range declared {
		if err := add(d.Ref, d.Options, d.Line, d.Column, false); err != nil {
			return nil, nil, err
		}
	}
	ordered, err = OrderFeatures(all, override)
	return ordered, refused, err
}

// orderFeatures sorts all (in declaration order) so each feature comes
// after those it dependsOn and, when listed, those it installsAfter;
// among the ready ones overrideFeatureInstallOrder comes first, then
// declaration order. A dependsOn cycle is an error.
func OrderFeatures(all []*Feature, override []string) ([]*Feature, error) {
	present := map[string]bool{}
	for _, f := range all {
		present[f.ID] = true
	}
	prio := func(f *Feature) int {
		for i, o := range override {
			if FeatureID(o) == f.ID {
				return i
			}
		}
		return len(override)
	}
	done := map[string]bool{}
	var out []*Feature
	for len(out) < len(all) {
		var best *Feature
		for _, f := range all {
			if done[f.ID] {
				continue
			}
			ready := true
			for _, d := range append(slices.Clone(f.DependsOn), f.InstallsAfter...) {
				d = FeatureID(d)
				if present[d] && !done[d] && d != f.ID {
					ready = false
				}
			}
			if ready && (best == nil || prio(f) < prio(best)) {
				best = f
			}
		}
		if best == nil {
			var left []string
			for _, f := range all {
				if !done[f.ID] {
					left = append(left, f.ID)
				}
			}
			return nil, fmt.Errorf("ordering features: dependsOn/installsAfter form a cycle among %s; break it or set overrideFeatureInstallOrder", quoteList(left))
		}
		done[best.ID] = true
		out = append(out, best)
	}
	return out, nil
}

// dirDigest is "sha256:<hex>" over the regular files under dir (paths,
// modes and contents, sorted).
func DirDigest(dir string) (string, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return "", err
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%s is not a directory", dir)
	}
	h := sha256.New()
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %o %d\n", filepath.ToSlash(rel), info.Mode().Perm(), len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

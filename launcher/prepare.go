package launcher

import (
	"context"
	"errors"
	"fmt"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// BuildPolicy says when Prepare builds. The zero value is invalid.
type BuildPolicy string

// Build policies accepted by --sandbox-build.
const (
	// BuildAuto builds Tier 0/1 images only when missing (launch's default).
	BuildAuto BuildPolicy = "auto"
	// BuildAlways rebuilds (sandbox-base too when the image extends it).
	BuildAlways BuildPolicy = "always"
	// BuildNever fails when the image is missing.
	BuildNever BuildPolicy = "never"
)

// String returns the flag spelling.
func (p BuildPolicy) String() string { return string(p) }

// ParseBuildPolicy parses "auto", "always" or "never".
func ParseBuildPolicy(s string) (BuildPolicy, error) {
	switch p := BuildPolicy(strings.ToLower(strings.TrimSpace(s))); p {
	case BuildAuto, BuildAlways, BuildNever:
		return p, nil
	}
	return "", fmt.Errorf("unknown build policy %q; use \"auto\", \"always\" or \"never\"", s)
}

// PrepareOptions adjusts Prepare.
type PrepareOptions struct {
	// Policy is required.
	Policy BuildPolicy
	// Output receives build and pull logs; nil discards them (failures
	// still quote the last lines).
	Output io.Writer
	// Network is the build network ("" = the runtime's default).
	Network string
}

// PrepareResult says what Prepare did.
type PrepareResult struct {
	// Image is the plan's image, now present locally.
	Image string
	// Built and Pulled list the images built and pulled, in order.
	Built, Pulled []string
}

// ErrImageMissing is wrapped by Prepare when BuildNever finds no image.
var ErrImageMissing = errors.New("image missing")

// Prepare makes the plan's image present with rt, following opts.Policy:
// Tier 0 builds the embedded sandbox-base; Tier 1 builds sandbox-base first
// when the Dockerfile extends it, then the Dockerfile; images used as is
// (Tier 2, or a devcontainer "image") are pulled when missing unless the
// policy is BuildNever. Then a plan with devcontainer features gets its
// features image (FeaturesImage, built when missing, or always under
// BuildAlways), which res.Image names.
func Prepare(ctx context.Context, rt runtime.Runtime, p *Plan, opts PrepareOptions) (PrepareResult, error) {
	res, err := prepareImage(ctx, rt, p, opts)
	if err == nil {
		err = prepareFeatures(ctx, rt, p, opts, &res)
	}
	return res, err
}

func prepareImage(ctx context.Context, rt runtime.Runtime, p *Plan, opts PrepareOptions) (PrepareResult, error) {
	res := PrepareResult{Image: p.Image}
	switch opts.Policy {
	case BuildAuto, BuildAlways, BuildNever:
	default:
		return res, fmt.Errorf("preparing %s: unknown build policy %q; use \"auto\", \"always\" or \"never\"", p.Image, opts.Policy)
	}
	if p.Tier == TierUnset {
		return res, errors.New("preparing the sandbox image: the plan has no tier (use NewPlan)")
	}
	if err := p.Refusal(); err != nil {
		return res, err
	}
	if p.Build == nil {
		exists, err := imagePresent(ctx, rt, p.Image, opts.Policy, " locally and --sandbox-build=never forbids pulling (pull or load it, or use --sandbox-build=auto)")
		if err != nil || exists {
			return res, err
		}
		if err := rt.Pull(ctx, p.Image, opts.Output); err != nil {
			return res, fmt.Errorf("preparing %s: %w (build or load it locally, or check the name)", p.Image, err)
		}
		res.Pulled = append(res.Pulled, p.Image)
		return res, nil
	}

	// A present project image needs nothing else under auto/never.
	if !p.Build.Embedded && opts.Policy != BuildAlways {
		exists, err := imagePresent(ctx, rt, p.Image, opts.Policy, missingBuildFix)
		if err != nil || exists {
			return res, err
		}
	}
	if p.Build.Embedded || p.Build.ExtendsBase {
		built, err := ensureBase(ctx, rt, p.BaseImage, opts)
		if err != nil {
			return res, err
		}
		if built {
			res.Built = append(res.Built, p.BaseImage)
		}
	}
	if p.Build.Embedded {
		return res, nil
	}
	req := runtime.BuildRequest{
		Tag:        p.Image,
		Dockerfile: p.Build.Dockerfile,
		Context:    p.Build.Context,
		Args:       p.Build.Args,
		Target:     p.Build.Target,
		CacheFrom:  p.Build.CacheFrom,
		Options:    p.Build.Options,
		Labels:     map[string]string{LabelManaged: "true", LabelDefinition: p.Build.Digest},
		Network:    opts.Network,
		Output:     opts.Output,
	}
	if df, err := os.ReadFile(p.Build.Dockerfile); err == nil {
		stop, err := withHostRegistries(ctx, &req, df)
		if err != nil {
			return res, fmt.Errorf("preparing %s: %w", p.Image, err)
		}
		defer stop()
	}
	err := rt.Build(ctx, req)
	if err != nil {
		return res, fmt.Errorf("preparing %s from %s: %w", p.Image, relTo(p.ProjectDir, p.Build.Dockerfile), err)
	}
	res.Built = append(res.Built, p.Image)
	return res, nil
}

// ensureBase builds sandbox-base under BuildAlways, or when missing under
// BuildAuto; under BuildNever a missing base is an error.
func ensureBase(ctx context.Context, rt runtime.Runtime, base string, opts PrepareOptions) (bool, error) {
	if opts.Policy != BuildAlways {
		exists, err := imagePresent(ctx, rt, base, opts.Policy, missingBuildFix)
		if err != nil || exists {
			return false, err
		}
	}
	if err := BuildBase(ctx, rt, base, opts.Output, opts.Network); err != nil {
		return false, err
	}
	return true, nil
}

// missingBuildFix is the fix named when an image Prepare builds is missing
// under BuildNever.
const missingBuildFix = " (run `aileron-proxy sandbox build` or use --sandbox-build=auto)"

// imagePresent reports whether image is present locally. Under BuildNever
// a missing image is an error wrapping ErrImageMissing, followed by fix.
func imagePresent(ctx context.Context, rt runtime.Runtime, image string, policy BuildPolicy, fix string) (bool, error) {
	exists, err := rt.ImageExists(ctx, image)
	if err != nil {
		return false, fmt.Errorf("preparing %s: %w", image, err)
	}
	if !exists && policy == BuildNever {
		return false, fmt.Errorf("preparing %s: %w%s", image, ErrImageMissing, fix)
	}
	return exists, nil
}

// BuildBase builds the embedded sandbox-base definition as tag. Its FROM,
// debian:bookworm-slim, must be present or pullable.
func BuildBase(ctx context.Context, rt runtime.Runtime, tag string, out io.Writer, network string) error {
	dir, err := os.MkdirTemp("", "aileron-sandbox-base-*")
	if err != nil {
		return fmt.Errorf("building %s: %w", tag, err)
	}
	defer os.RemoveAll(dir)
	df := filepath.Join(dir, "Dockerfile")
	if err := os.WriteFile(df, BaseDockerfile(), 0o644); err != nil {
		return fmt.Errorf("building %s: %w", tag, err)
	}
	err = rt.Build(ctx, runtime.BuildRequest{
		Tag:        tag,
		Dockerfile: df,
		Context:    dir,
		Labels:     map[string]string{LabelManaged: "true", LabelDefinition: BaseDefinitionDigest()},
		Network:    network,
		Output:     out,
	})
	if err != nil {
		return fmt.Errorf("preparing %s from the embedded definition: %w", tag, err)
	}
	return nil
}

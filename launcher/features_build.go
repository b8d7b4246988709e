package launcher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"github.com/aileron-dev/aileron-proxy/launcher/devcontainer"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// FeaturesRepository names the derived images that install a plan's
// features on its image; tags are the first 12 hex digits of the digest
// over the image and every feature's digest and options, so each is built
// once.
const FeaturesRepository = "aileron/sandbox-features"

// RunImage is the image the sandbox runs: FeaturesImage when the plan has
// features, else Image.
func (p *Plan) RunImage() string {
	if p.FeaturesImage != "" {
		return p.FeaturesImage
	}
	return p.Image
}

// planFeatures resolves the devcontainer's features (fetching OCI ones
// with opts.FeatureFetcher) and names the derived image.
func (p *Plan) planFeatures(dcDir string, dc *devcontainer.DevContainer, opts PlanOptions) error {
	if len(dc.Features) == 0 {
		return nil
	}
	fetch := opts.FeatureFetcher
	if fetch == nil {
		fetch = NewOCIFeatureFetcher("")
	}
	features, refused, err := devcontainer.ResolveFeatures(dcDir, dc.Features, dc.OverrideFeatureInstallOrder, fetch)
	if err != nil {
		return fmt.Errorf("resolving the features of %s: %w", devcontainer.Path, err)
	}
	vc := p.Vars(opts.LocalEnv, nil)
	for _, f := range features {
		f.InstallEnv = devcontainer.SubstituteMap(f.Env, vc)
	}
	p.Features, p.Refused = features, append(p.Refused, refused...)
	h := sha256.New()
	fmt.Fprintf(h, "image=%s\n", p.Image)
	if p.Build != nil {
		fmt.Fprintf(h, "definition=%s\n", p.Build.Digest)
	}
	for _, f := range features {
		fmt.Fprintf(h, "feature %q %s\n", f.ID, f.Digest)
		for _, k := range sortedKeys(f.InstallEnv) {
			fmt.Fprintf(h, "  option %q=%q\n", k, f.InstallEnv[k])
		}
	}
	p.FeaturesImage = FeaturesRepository + ":" + hex.EncodeToString(h.Sum(nil))[:12]
	return nil
}

// featuresDockerfile installs features on base as the devcontainer CLI
// does: as root, each feature's options sourced from its env file, its
// containerEnv set with ENV, then back to user.
func featuresDockerfile(base, user string, features []*devcontainer.Feature) string {
	var b strings.Builder
	fmt.Fprintf(&b, "FROM %s\nUSER root\n", base)
	for i, f := range features {
		dir := fmt.Sprintf("/tmp/aileron-features/%d", i)
		fmt.Fprintf(&b, "# %s (%s)\nCOPY %d/ %s/\n", f.Ref, f.Digest, i, dir)
		fmt.Fprintf(&b, "RUN cd %s && chmod +x install.sh && set -a && . ./aileron-feature.env && set +a && ./install.sh\n", dir)
		for _, k := range sortedKeys(f.ContainerEnv) {
			fmt.Fprintf(&b, "ENV %s=%s\n", k, strconv.Quote(f.ContainerEnv[k]))
		}
	}
	fmt.Fprintf(&b, "RUN rm -rf /tmp/aileron-features\nUSER %s\n", user)
	return b.String()
}

// featureEnvFile is the env file install.sh of f is run with: its
// resolved options and the users the devcontainer CLI names.
func featureEnvFile(f *devcontainer.Feature, remoteUser, containerUser string) string {
	env := map[string]string{"_REMOTE_USER": remoteUser, "_CONTAINER_USER": containerUser}
	for k, v := range f.InstallEnv {
		env[k] = v
	}
	var lines strings.Builder
	for _, k := range sortedKeys(env) {
		fmt.Fprintf(&lines, "%s=%s\n", k, devcontainer.ShQuote(env[k]))
	}
	return lines.String()
}

// buildFeaturesImage builds p.FeaturesImage from p.Image (which must be
// present): a context holding a copy of each feature and its env file.
func buildFeaturesImage(ctx context.Context, rt runtime.Runtime, p *Plan, opts PrepareOptions) error {
	img, err := probeImageUser(ctx, rt, p.Image, "")
	if err != nil {
		return err
	}
	user := img.Name
	if user == "" || user == "unknown" {
		user = strconv.Itoa(img.UID)
	}
	dir, err := os.MkdirTemp("", "aileron-features-*")
	if err != nil {
		return fmt.Errorf("installing features: %w", err)
	}
	defer os.RemoveAll(dir)
	remoteUser, containerUser := p.User, p.ContainerUser
	if containerUser == "" {
		containerUser = user
	}
	if remoteUser == "" {
		remoteUser = containerUser
	}
	for i, f := range p.Features {
		dst := filepath.Join(dir, strconv.Itoa(i))
		if err := copyTree(f.Dir, dst); err != nil {
			return fmt.Errorf("installing feature %q: copying it: %w", f.Ref, err)
		}
		if err := os.WriteFile(filepath.Join(dst, "aileron-feature.env"), []byte(featureEnvFile(f, remoteUser, containerUser)), 0o644); err != nil {
			return fmt.Errorf("installing feature %q: %w", f.Ref, err)
		}
	}
	df := filepath.Join(dir, "Dockerfile")
	if err := os.WriteFile(df, []byte(featuresDockerfile(p.Image, user, p.Features)), 0o644); err != nil {
		return fmt.Errorf("installing features: %w", err)
	}
	out := opts.Output
	if out == nil {
		out = io.Discard
	}
	fmt.Fprintf(out, "installing %d devcontainer features into %s\n", len(p.Features), p.FeaturesImage)
	err = rt.Build(ctx, runtime.BuildRequest{
		Tag: p.FeaturesImage, Dockerfile: df, Context: dir, Network: opts.Network, Output: opts.Output,
		Labels: map[string]string{LabelManaged: "true"},
	})
	if err != nil {
		return fmt.Errorf("installing the devcontainer features (%s): %w", devcontainer.Path, err)
	}
	return nil
}

// prepareFeatures builds the features image when the policy asks for it.
func prepareFeatures(ctx context.Context, rt runtime.Runtime, p *Plan, opts PrepareOptions, res *PrepareResult) error {
	if p.FeaturesImage == "" {
		return nil
	}
	res.Image = p.FeaturesImage
	if opts.Policy != BuildAlways {
		exists, err := rt.ImageExists(ctx, p.FeaturesImage)
		if err != nil || exists {
			return err
		}
		if opts.Policy == BuildNever {
			return fmt.Errorf("preparing %s: the features image is not present and --sandbox-build=never forbids building it (use --sandbox-build=auto)", p.FeaturesImage)
		}
	}
	if err := buildFeaturesImage(ctx, rt, p, opts); err != nil {
		return err
	}
	res.Built = append(res.Built, p.FeaturesImage)
	return nil
}

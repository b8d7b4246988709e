package launcher

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/aileron-dev/aileron-proxy/launcher/devcontainer"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// FeatureLayerMediaType is the media type of a devcontainer feature's
// single layer: an uncompressed tar of the feature directory.
const FeatureLayerMediaType = "application/vnd.devcontainers.layer.v1+tar"

// maxFeatureSize bounds an extracted feature.
const maxFeatureSize = 64 << 20

// OCIFeatureFetcher fetches features distributed as OCI artifacts, with
// the runtime's registry credentials (Docker's config.json, Podman's
// auth.json) or anonymously; a registry on loopback is spoken to over
// plain HTTP, as Docker does. Fetched features are cached by manifest
// digest.
type OCIFeatureFetcher struct {
	cacheDir string
}

var _ devcontainer.FeatureFetcher = (*OCIFeatureFetcher)(nil)

// NewOCIFeatureFetcher caches features under cacheDir; empty means
// <user cache dir>/aileron/features.
func NewOCIFeatureFetcher(cacheDir string) *OCIFeatureFetcher {
	if cacheDir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		cacheDir = filepath.Join(base, "aileron", "features")
	}
	return &OCIFeatureFetcher{cacheDir: cacheDir}
}

// Fetch resolves ref's manifest, then extracts its feature layer into
// the cache (once per digest).
func (f *OCIFeatureFetcher) Fetch(ref string) (dir, digest string, err error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", "", fmt.Errorf("%q is not an OCI reference (write registry/path/name:tag, or ./name for a local feature): %w", ref, err)
	}
	auth := remote.WithAuthFromKeychain(authn.DefaultKeychain)
	desc, err := remote.Get(r, auth)
	if err != nil {
		return "", "", err
	}
	m, err := v1.ParseManifest(bytes.NewReader(desc.Manifest))
	if err != nil {
		return "", "", fmt.Errorf("reading the manifest of %s: %w", ref, err)
	}
	var layer *v1.Descriptor
	for i := range m.Layers {
		if string(m.Layers[i].MediaType) == FeatureLayerMediaType {
			layer = &m.Layers[i]
		}
	}
	if layer == nil {
		return "", "", fmt.Errorf("%s is not a devcontainer feature: no %s layer", ref, FeatureLayerMediaType)
	}
	digest = desc.Digest.String()
	dir = filepath.Join(f.cacheDir, desc.Digest.Algorithm, desc.Digest.Hex)
	if _, err := os.Stat(filepath.Join(dir, "devcontainer-feature.json")); err == nil {
		return dir, digest, nil
	}
	blob, err := remote.Layer(r.Context().Digest(layer.Digest.String()), auth)
	if err != nil {
		return "", "", err
	}
	rc, err := blob.Compressed() // the blob as stored; verified against its digest at EOF
	if err != nil {
		return "", "", err
	}
	defer rc.Close()
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", "", err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".fetch-*")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(tmp)
	if err := extractFeature(rc, tmp); err != nil {
		return "", "", fmt.Errorf("extracting %s: %w", ref, err)
	}
	// The digest is checked when rc reaches EOF, which the tar reader,
	// stopping at the end-of-archive blocks, never asks for.
	if _, err := io.Copy(io.Discard, rc); err != nil {
		return "", "", fmt.Errorf("verifying %s: %w", ref, err)
	}
	if err := os.Rename(tmp, dir); err != nil && !errors.Is(err, os.ErrExist) {
		if _, statErr := os.Stat(filepath.Join(dir, "devcontainer-feature.json")); statErr != nil {
			return "", "", err
		}
	}
	return dir, digest, nil
}

// extractFeature extracts a feature tar (gzip tolerated) into dir:
// regular files and directories only, nothing outside dir, bounded size.
func extractFeature(r io.Reader, dir string) error {
	br := bufio.NewReader(r)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return err
		}
		defer gz.Close()
		r = gz
	} else {
		r = br
	}
	tr := tar.NewReader(r)
	var total int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		clean := filepath.Clean(filepath.FromSlash(strings.TrimPrefix(h.Name, "./")))
		if clean == "." {
			continue
		}
		if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
			return fmt.Errorf("entry %q leaves the feature directory", h.Name)
		}
		target := filepath.Join(dir, clean)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			total += h.Size
			if total > maxFeatureSize {
				return fmt.Errorf("the feature is larger than %d bytes", maxFeatureSize)
			}
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode&0o755)|0o644)
			if err != nil {
				return err
			}
			if _, err := io.CopyN(out, tr, h.Size); err != nil {
				out.Close()
				return err
			}
			if err := out.Close(); err != nil {
				return err
			}
		}
	}
}

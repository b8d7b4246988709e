package launcher

import (
	"crypto/sha256"
	_ "embed" // the sandbox-base definition and scaffold templates
	"encoding/hex"
	"strings"
)

// BaseVersion is the sandbox-base version this binary builds and scaffolds.
// Bump it whenever sandbox-base/Dockerfile changes so that
// --sandbox-build=auto rebuilds images made from an older definition.
const BaseVersion = "0.1.0"

// BaseRepository is the local repository name of the sandbox-base image.
const BaseRepository = "aileron/sandbox-base"

// baseDockerfile is a string so the embedded definition is immutable.
//
//go:embed sandbox-base/Dockerfile
var baseDockerfile string

// BaseImage returns the sandbox-base reference for version ("" means
// BaseVersion), e.g. "aileron/sandbox-base:0.1.0".
func BaseImage(version string) string {
	if version == "" {
		version = BaseVersion
	}
	return BaseRepository + ":" + version
}

// BaseDockerfile returns a copy of the embedded sandbox-base Dockerfile.
func BaseDockerfile() []byte { return []byte(baseDockerfile) }

// BaseDefinitionDigest is "sha256:<hex>" of the embedded Dockerfile; builds
// record it in the image label LabelDefinition.
func BaseDefinitionDigest() string {
	sum := sha256.Sum256([]byte(baseDockerfile))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Labels set on everything the launcher creates.
const (
	// LabelManaged marks images, networks and containers made by aileron-proxy.
	LabelManaged = "dev.aileron.managed"
	// LabelDefinition records the digest of the Dockerfile an image was built from.
	LabelDefinition = "dev.aileron.sandbox.definition"
)

// sameImage reports whether two image references name the same local image,
// ignoring the registry prefixes Docker ("docker.io/", "docker.io/library/")
// and Podman ("localhost/") add to short names.
func sameImage(a, b string) bool {
	return normalizeRef(a) == normalizeRef(b)
}

func normalizeRef(ref string) string {
	ref = strings.ToLower(strings.TrimSpace(ref))
	for _, p := range []string{"docker.io/library/", "docker.io/", "index.docker.io/library/", "index.docker.io/", "localhost/"} {
		if strings.HasPrefix(ref, p) {
			ref = strings.TrimPrefix(ref, p)
			break
		}
	}
	if !strings.Contains(ref[strings.LastIndex(ref, "/")+1:], ":") && !strings.Contains(ref, "@") {
		ref += ":latest"
	}
	return ref
}

// Package registrytest runs Debian's docker-registry on loopback and
// pushes devcontainer features to it, for tests of OCI feature fetching.
package registrytest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/bcrypt"
)

// FeatureLayerMediaType is the devcontainer feature layer's media type
// (launcher.FeatureLayerMediaType; repeated so this package imports no
// product code).
const FeatureLayerMediaType = "application/vnd.devcontainers.layer.v1+tar"

// Auth, when set on Start, makes the registry require HTTP basic
// authentication (htpasswd) for every request.
type Auth struct{ User, Password string }

// Start runs docker-registry on a free 127.0.0.1 port with storage in a
// temp dir until the test ends, and returns its host:port. With auth, it
// requires those credentials. It skips without the binary, except under
// CI=true, where it fails.
func Start(t testing.TB, auth ...Auth) string {
	t.Helper()
	bin := testkit.RequireTool(t, "docker-registry")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yml")
	body := fmt.Sprintf("version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n", filepath.Join(dir, "data"), addr)
	for _, a := range auth {
		hash, err := bcrypt.GenerateFromPassword([]byte(a.Password), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		htpasswd := filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(htpasswd, []byte(a.User+":"+string(hash)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		body += fmt.Sprintf("auth:\n  htpasswd:\n    realm: test\n    path: %s\n", htpasswd)
	}
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", cfg)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(15 * time.Second); ; {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("docker-registry did not listen on %s: %s", addr, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// PushFeature pushes the directory dir to ref as a devcontainer feature:
// an OCI manifest with one uncompressed tar layer of FeatureLayerMediaType.
// opts are passed to remote.Write (e.g. remote.WithAuth).
func PushFeature(t testing.TB, ref, dir string, opts ...remote.Option) {
	t.Helper()
	var tarball bytes.Buffer
	cmd := exec.Command("tar", "-C", dir, "-cf", "-", ".")
	cmd.Stdout = &tarball
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	layer := static.NewLayer(tarball.Bytes(), types.MediaType(FeatureLayerMediaType))
	img, err := mutate.Append(empty.Image, mutate.Addendum{Layer: layer, MediaType: types.MediaType(FeatureLayerMediaType)})
	if err != nil {
		t.Fatal(err)
	}
	img = mutate.ConfigMediaType(mutate.MediaType(img, types.OCIManifestSchema1), "application/vnd.devcontainers")
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img, opts...); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
}

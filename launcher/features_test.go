package launcher

import (
	"archive/tar"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/aileron-dev/aileron-proxy/internal/registrytest"
	"github.com/aileron-dev/aileron-proxy/launcher/devcontainer"
)

// featureFiles returns the files of a feature named id whose install.sh
// writes /usr/local/bin/<id>-tool printing its options.
func featureFiles(id, meta string) map[string]string {
	return map[string]string{
		"devcontainer-feature.json": meta,
		"install.sh":                "#!/bin/sh\nset -e\nprintf '#!/bin/sh\\necho " + id + " version=%s greeting=%s user=%s\\n' \"${VERSION:-}\" \"${GREETING:-}\" \"$_REMOTE_USER\" > /usr/local/bin/" + id + "-tool\nchmod 755 /usr/local/bin/" + id + "-tool\n",
	}
}

// fakeFetcher serves OCI features from directories (unit tests only; the
// real registry is in TestOCIFeatureFetcherRealRegistry).
type fakeFetcher map[string]string

func (f fakeFetcher) Fetch(ref string) (string, string, error) {
	dir, ok := f[devcontainer.FeatureID(ref)]
	if !ok {
		return "", "", fmt.Errorf("no such feature %s", ref)
	}
	d, err := devcontainer.DirDigest(dir)
	return dir, d, err
}

func writeFeature(t *testing.T, dir string, files map[string]string) string {
	t.Helper()
	for n, body := range files {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestFeaturesResolvedAndOrdered(t *testing.T) {
	oci := t.TempDir()
	fetch := fakeFetcher{
		"reg.test/f/node":   writeFeature(t, filepath.Join(oci, "node"), featureFiles("node", `{"id": "node", "options": {"version": {"type": "string", "default": "lts"}}, "dependsOn": {"reg.test/f/common:2": {"greeting": "from-dep"}}, "containerEnv": {"NODE_HOME": "/opt/node"}}`)),
		"reg.test/f/common": writeFeature(t, filepath.Join(oci, "common"), featureFiles("common", `{"id": "common", "options": {"greeting": {"type": "string", "default": "hi"}}}`)),
		"reg.test/f/late":   writeFeature(t, filepath.Join(oci, "late"), featureFiles("late", `{"id": "late", "installsAfter": ["./local"]}`)),
	}
	dir := writeProject(t, map[string]string{
		devcontainer.Path: `{
  "image": "debian:bookworm-slim",
  "features": {
    "reg.test/f/late:1": true,
    "reg.test/f/node:1": {"version": "20", "install-tools": true},
    "./local": "1.2",
  },
  "overrideFeatureInstallOrder": ["reg.test/f/node"],
}`,
	})
	writeFeature(t, filepath.Join(dir, ".devcontainer", "local"), featureFiles("local", `{"id": "local", "options": {"version": {"type": "string", "default": "0"}}}`))
	p, err := NewPlan(dir, PlanOptions{FeatureFetcher: fetch})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, f := range p.Features {
		order = append(order, f.ID)
	}
	// node is first by override but needs common; late waits for ./local.
	if want := []string{"reg.test/f/common", "reg.test/f/node", "./local", "reg.test/f/late"}; !reflect.DeepEqual(order, want) {
		t.Errorf("order = %q, want %q", order, want)
	}
	node, common := p.Features[1], p.Features[0]
	if !reflect.DeepEqual(node.Env, map[string]string{"VERSION": "20", "INSTALL_TOOLS": "true"}) || node.ContainerEnv["NODE_HOME"] != "/opt/node" {
		t.Errorf("node = %+v", node)
	}
	if !common.DependedOn || common.Env["GREETING"] != "from-dep" {
		t.Errorf("common (a dependency with dependsOn's options) = %+v", common)
	}
	if p.Features[2].Env["VERSION"] != "1.2" {
		t.Errorf("a string value is the version option: %+v", p.Features[2])
	}
	if !strings.HasPrefix(p.FeaturesImage, FeaturesRepository+":") || p.RunImage() != p.FeaturesImage {
		t.Errorf("FeaturesImage = %q, RunImage = %q", p.FeaturesImage, p.RunImage())
	}
	var text bytes.Buffer
	if err := WritePlanText(&text, p, RuntimeInfo{Kind: "docker", Selection: "--runtime docker"}); err != nil {
		t.Fatal(err)
	}
	golden(t, "plan-features.txt", normalize(strings.ReplaceAll(text.String(), FeaturesRepository+":"+strings.TrimPrefix(p.FeaturesImage, FeaturesRepository+":"), FeaturesRepository+":<tag>"), dir))
	df := featuresDockerfile("base:1", "agent", p.Features)
	for _, w := range []string{"FROM base:1\nUSER root\n", "COPY 1/ /tmp/aileron-features/1/\nRUN cd /tmp/aileron-features/1 && chmod +x install.sh && set -a && . ./aileron-feature.env && set +a && ./install.sh\nENV NODE_HOME=\"/opt/node\"\n", "USER agent\n"} {
		if !strings.Contains(df, w) {
			t.Errorf("features Dockerfile lacks %q:\n%s", w, df)
		}
	}
}

func TestFeatureRefusalsAndErrors(t *testing.T) {
	for _, tc := range []struct{ meta, want string }{
		{`{"id": "x", "privileged": true}`, "privileged"},
		{`{"id": "x", "capAdd": ["SYS_PTRACE"]}`, "capAdd SYS_PTRACE"},
		{`{"id": "x", "securityOpt": ["seccomp=unconfined"]}`, "securityOpt seccomp=unconfined"},
		{`{"id": "x", "init": true}`, "init"},
		{`{"id": "x", "mounts": [{"source": "/var/run/docker.sock", "target": "/var/run/docker.sock", "type": "bind"}]}`, "mounts"},
	} {
		dir := writeProject(t, map[string]string{devcontainer.Path: "{\"image\": \"x\",\n \"features\": {\"./x\": {}}}"})
		writeFeature(t, filepath.Join(dir, ".devcontainer", "x"), featureFiles("x", tc.meta))
		p, err := NewPlan(dir, PlanOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Refusal(); err == nil || !strings.Contains(err.Error(), ":2:15: features: refused: feature \"./x\" asks for "+tc.want) {
			t.Errorf("feature %s: Refusal() = %v, want %q", tc.meta, err, tc.want)
		}
	}
	for _, tc := range []struct{ features, want string }{
		{`{"../outside": {}}`, "a local feature must be inside .devcontainer/"},
		{`{"./missing": {}}`, `feature "./missing"`},
		{`{"./x": 3}`, "must be an object of options, a version string or true"},
		{`{"reg.test/none:1": {}}`, `fetching feature "reg.test/none:1": no such feature`},
	} {
		dir := writeProject(t, map[string]string{devcontainer.Path: `{"image": "x", "features": ` + tc.features + `}`})
		if _, err := NewPlan(dir, PlanOptions{FeatureFetcher: fakeFetcher{}}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("features %s: NewPlan error = %v, want %q", tc.features, err, tc.want)
		}
	}
	a := &devcontainer.Feature{ID: "a", DependsOn: []string{"b"}}
	b := &devcontainer.Feature{ID: "b", DependsOn: []string{"a"}}
	if _, err := devcontainer.OrderFeatures([]*devcontainer.Feature{a, b}, nil); err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Errorf("orderFeatures(cycle) = %v, want a cycle error", err)
	}
}

func TestFeatureEnvName(t *testing.T) {
	for in, want := range map[string]string{"version": "VERSION", "install-tools": "INSTALL_TOOLS", "9lives": "_LIVES", "a.b": "A_B"} {
		if got := devcontainer.FeatureEnvName(in); got != want {
			t.Errorf("featureEnvName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestOCIFeatureFetcherRealRegistry(t *testing.T) {
	reg := registrytest.Start(t)
	registrytest.PushFeature(t, reg+"/features/hello:1", writeFeature(t, t.TempDir(), featureFiles("hello", `{"id": "hello", "options": {"greeting": {"type": "string", "default": "hi"}}}`)))
	cache := t.TempDir()
	f := NewOCIFeatureFetcher(cache)
	dir, digest, err := f.Fetch(reg + "/features/hello:1")
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	if !strings.HasPrefix(digest, "sha256:") || !strings.HasPrefix(dir, cache) {
		t.Errorf("Fetch = %q, %q", dir, digest)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "install.sh")); err != nil || !strings.Contains(string(b), "hello-tool") {
		t.Errorf("install.sh = %q, %v", b, err)
	}
	// Cached by digest: a second fetch reuses the directory.
	dir2, digest2, err := f.Fetch(reg + "/features/hello:1")
	if err != nil || dir2 != dir || digest2 != digest {
		t.Errorf("second Fetch = %q, %q, %v", dir2, digest2, err)
	}
	if _, _, err := f.Fetch(reg + "/features/absent:1"); err == nil {
		t.Error("Fetch(absent) succeeded")
	}
}

func TestExtractFeatureRefusesEscapes(t *testing.T) {
	var buf bytes.Buffer
	tw := newTarWriter(&buf)
	tw("../evil", "x")
	if err := extractFeature(&buf, t.TempDir()); err == nil || !strings.Contains(err.Error(), "leaves the feature directory") {
		t.Errorf("extractFeature(../evil) = %v", err)
	}
}

func newTarWriter(w *bytes.Buffer) func(name, body string) {
	tw := tar.NewWriter(w)
	return func(name, body string) {
		_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
		_, _ = tw.Write([]byte(body))
		_ = tw.Close()
	}
}

// TestOCIFeatureFetcherUsesRuntimeCredentials: a registry requiring
// authentication refuses the anonymous fetch; with the credentials in
// Docker's config.json (DOCKER_CONFIG), as `docker login` writes them, the
// fetch succeeds.
func TestOCIFeatureFetcherUsesRuntimeCredentials(t *testing.T) {
	auth := registrytest.Auth{User: "feature-reader", Password: "pw-" + t.Name()}
	reg := registrytest.Start(t, auth)
	ref := reg + "/features/private:1"
	registrytest.PushFeature(t, ref, writeFeature(t, t.TempDir(), featureFiles("private", `{"id": "private"}`)),
		remote.WithAuth(&authn.Basic{Username: auth.User, Password: auth.Password}))
	cfgDir := t.TempDir()
	t.Setenv("DOCKER_CONFIG", cfgDir)
	t.Setenv("REGISTRY_AUTH_FILE", filepath.Join(cfgDir, "none.json"))
	if _, _, err := NewOCIFeatureFetcher(t.TempDir()).Fetch(ref); err == nil {
		t.Fatal("anonymous Fetch from a registry requiring authentication succeeded")
	}
	cfg := fmt.Sprintf(`{"auths": {%q: {"auth": %q}}}`, reg, base64.StdEncoding.EncodeToString([]byte(auth.User+":"+auth.Password)))
	if err := os.WriteFile(filepath.Join(cfgDir, "config.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, digest, err := NewOCIFeatureFetcher(t.TempDir()).Fetch(ref); err != nil || !strings.HasPrefix(digest, "sha256:") {
		t.Fatalf("Fetch with Docker's credentials = %q, %v", digest, err)
	}
}

// TestFeatureOptionsResolveVariables: option values are resolved like the
// rest of devcontainer.json (${localEnv:...}, ${localWorkspaceFolderBasename})
// for install.sh and the derived image's tag, and stay as written in the
// plan's output.
func TestFeatureOptionsResolveVariables(t *testing.T) {
	dir := writeProject(t, map[string]string{
		devcontainer.Path: `{"image": "debian:bookworm-slim", "features": {"./local": {"greeting": "${localEnv:GREETING}-${localWorkspaceFolderBasename}"}}}`,
	})
	writeFeature(t, filepath.Join(dir, ".devcontainer", "local"), featureFiles("local", `{"id": "local", "options": {"greeting": {"type": "string"}}}`))
	plan := func(greeting string) *Plan {
		p, err := NewPlan(dir, PlanOptions{LocalEnv: func(k string) (string, bool) { return greeting, k == "GREETING" }})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := plan("host-value")
	f := p.Features[0]
	want := "GREETING='host-value-" + filepath.Base(dir) + "'\n"
	if env := featureEnvFile(f, "agent", "agent"); !strings.Contains(env, want) {
		t.Errorf("install env file:\n%s\nwant the line %q", env, want)
	}
	if f.Env["GREETING"] != "${localEnv:GREETING}-${localWorkspaceFolderBasename}" {
		t.Errorf("the plan's option = %q, want it as written", f.Env["GREETING"])
	}
	out, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(out, []byte("host-value")) {
		t.Errorf("the plan's JSON holds the resolved host value: %s", out)
	}
	if other := plan("other-value"); other.FeaturesImage == p.FeaturesImage {
		t.Errorf("FeaturesImage %q does not change with the resolved option", p.FeaturesImage)
	}
}

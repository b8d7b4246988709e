package launcher

import (
	"github.com/aileron-dev/aileron-proxy/launcher/devcontainer"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// writeProject creates a project directory holding files (relative
// "/"-separated paths) and returns it.
func writeProject(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "My Project")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestNewPlanTiers(t *testing.T) {
	base := BaseImage("")
	tests := []struct {
		name  string
		files map[string]string
		check func(t *testing.T, dir string, p *Plan)
	}{
		{
			name:  "tier 0 without devcontainer",
			files: map[string]string{"README": "x"},
			check: func(t *testing.T, dir string, p *Plan) {
				if p.Tier != TierBase || p.Image != base || p.Build == nil || !p.Build.Embedded || p.DevContainer != "" {
					t.Errorf("plan = %+v (build %+v), want tier 0 with the embedded base", p, p.Build)
				}
				if p.Build.Digest != BaseDefinitionDigest() {
					t.Errorf("Digest = %q, want %q", p.Build.Digest, BaseDefinitionDigest())
				}
			},
		},
		{
			name: "tier 1 extends base",
			files: map[string]string{
				devcontainer.Path: `{
  // starter
  "build": {"dockerfile": "Dockerfile",},
  "containerEnv": {"A": "1"},
}`,
				".devcontainer/Dockerfile": "# syntax comment\nFROM aileron/sandbox-base:" + BaseVersion + "\nUSER root\n",
			},
			check: func(t *testing.T, dir string, p *Plan) {
				if p.Tier != TierDevcontainer || !p.Build.ExtendsBase || p.Build.Embedded {
					t.Fatalf("plan = %+v (build %+v), want tier 1 extending the base", p, p.Build)
				}
				if want := filepath.Join(dir, ".devcontainer", "Dockerfile"); p.Build.Dockerfile != want {
					t.Errorf("Dockerfile = %q, want %q", p.Build.Dockerfile, want)
				}
				if want := filepath.Join(dir, ".devcontainer"); p.Build.Context != want {
					t.Errorf("Context = %q, want %q", p.Build.Context, want)
				}
				if !strings.HasPrefix(p.Image, "aileron/sandbox-my-project:") || len(p.Image) != len("aileron/sandbox-my-project:")+12 {
					t.Errorf("Image = %q, want aileron/sandbox-my-project:<12 hex>", p.Image)
				}
				if !reflect.DeepEqual(p.ContainerEnv, map[string]string{"A": "1"}) {
					t.Errorf("ContainerEnv = %v", p.ContainerEnv)
				}
				if p.Mediation != devcontainer.MediationDefault || p.ApprovalSurface != devcontainer.ApprovalSurfaceBoth {
					t.Errorf("defaults = %q/%q, want default/both", p.Mediation, p.ApprovalSurface)
				}
			},
		},
		{
			name: "tier 1 base named through an ARG and build args, context outside .devcontainer",
			files: map[string]string{
				devcontainer.Path:           `{"build": {"dockerfile": "../docker/Dockerfile", "context": "..", "args": {"BASE_TAG": "` + BaseVersion + `"}}}`,
				"docker/Dockerfile":         "ARG BASE=aileron/sandbox-base\nARG BASE_TAG=0.0.1\nFROM ${BASE}:${BASE_TAG} AS base\nFROM base\n",
				".devcontainer/unused.file": "",
			},
			check: func(t *testing.T, dir string, p *Plan) {
				if !p.Build.ExtendsBase {
					t.Errorf("ExtendsBase = false, want true (FROM ${BASE}:${BASE_TAG} with BASE_TAG=%s)", BaseVersion)
				}
				if p.Build.Context != dir {
					t.Errorf("Context = %q, want the project %q", p.Build.Context, dir)
				}
				if len(p.Warnings) != 0 {
					t.Errorf("Warnings = %q, want none", p.Warnings)
				}
			},
		},
		{
			name: "tier 1 on another base version warns",
			files: map[string]string{
				devcontainer.Path:          `{"build": {"dockerfile": "Dockerfile"}}`,
				".devcontainer/Dockerfile": "FROM docker.io/aileron/sandbox-base:0.0.9\n",
			},
			check: func(t *testing.T, dir string, p *Plan) {
				if p.Build.ExtendsBase {
					t.Errorf("ExtendsBase = true for another version")
				}
				if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "change FROM to "+base) {
					t.Errorf("Warnings = %q, want one saying to change FROM to %s", p.Warnings, base)
				}
			},
		},
		{
			name: "tier 1 image without build",
			files: map[string]string{
				devcontainer.Path: `{"image": "mcr.microsoft.com/devcontainers/base:bookworm", "shutdownAction": "none", "postAttachCommand": "x"}`,
			},
			check: func(t *testing.T, dir string, p *Plan) {
				if p.Tier != TierDevcontainer || p.Image != "mcr.microsoft.com/devcontainers/base:bookworm" || p.Build != nil {
					t.Errorf("plan = %+v, want tier 1 using the image as is", p)
				}
				if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "ignoring postAttachCommand, shutdownAction: aileron-proxy does not apply them (docs/launcher.md") {
					t.Errorf("Warnings = %q, want the ignored keys named", p.Warnings)
				}
			},
		},
		{
			name: "tier 2 byo image wins over build",
			files: map[string]string{
				devcontainer.Path: `{"build": {"dockerfile": "Missing"}, "customizations": {"aileron": {"image": "ghcr.io/acme/agent:1", "approval_surface": "api"}}}`,
			},
			check: func(t *testing.T, dir string, p *Plan) {
				if p.Tier != TierImage || p.Image != "ghcr.io/acme/agent:1" || p.Build != nil {
					t.Errorf("plan = %+v, want tier 2", p)
				}
				if p.ApprovalSurface != devcontainer.ApprovalSurfaceAPI {
					t.Errorf("ApprovalSurface = %q, want api", p.ApprovalSurface)
				}
				if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "build and image are ignored") {
					t.Errorf("Warnings = %q", p.Warnings)
				}
			},
		},
		{
			name:  "root .devcontainer.json is not read but warned about",
			files: map[string]string{".devcontainer.json": `{"image": "x"}`},
			check: func(t *testing.T, dir string, p *Plan) {
				if p.Tier != TierBase || len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "move it there") {
					t.Errorf("plan = %+v, want tier 0 with a warning", p)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeProject(t, tc.files)
			p, err := NewPlan(dir, PlanOptions{})
			if err != nil {
				t.Fatalf("NewPlan: %v", err)
			}
			if p.ProjectDir != dir || p.BaseImage != base {
				t.Errorf("ProjectDir, BaseImage = %q, %q", p.ProjectDir, p.BaseImage)
			}
			tc.check(t, dir, p)
		})
	}
}

func TestNewPlanErrors(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{
			name:  "neither build nor image",
			files: map[string]string{devcontainer.Path: `{"name": "x"}`},
			want:  []string{"set build.dockerfile or image", "sandbox init --force"},
		},
		{
			name:  "missing Dockerfile",
			files: map[string]string{devcontainer.Path: `{"build": {"dockerfile": "Nope"}}`},
			want:  []string{"reading the Dockerfile build.dockerfile names", "Nope", "sandbox init --force"},
		},
		{
			name: "context not a directory",
			files: map[string]string{
				devcontainer.Path:          `{"build": {"dockerfile": "Dockerfile", "context": "Dockerfile"}}`,
				".devcontainer/Dockerfile": "FROM x\n",
			},
			want: []string{`checking build.context "Dockerfile"`, "not a directory"},
		},
		{
			name:  "invalid customizations are errors with location",
			files: map[string]string{devcontainer.Path: "{\n\"customizations\": {\"aileron\": {\"mediation\": \"none\"}}}"},
			want:  []string{filepath.FromSlash(devcontainer.Path) + ":2:", `unsupported value "none"`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeProject(t, tc.files)
			p, err := NewPlan(dir, PlanOptions{})
			if err == nil {
				t.Fatalf("NewPlan = %+v, want an error", p)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("NewPlan error = %q, want it to contain %q", err, w)
				}
			}
		})
	}
	if _, err := NewPlan(filepath.Join(t.TempDir(), "absent"), PlanOptions{}); err == nil || !strings.Contains(err.Error(), "--project") {
		t.Errorf("NewPlan(absent dir) error = %v, want one naming --project", err)
	}
}

func TestPlanImageTagFollowsDockerfile(t *testing.T) {
	dir := writeProject(t, map[string]string{
		devcontainer.Path:          `{"build": {"dockerfile": "Dockerfile"}}`,
		".devcontainer/Dockerfile": "FROM aileron/sandbox-base:" + BaseVersion + "\n",
	})
	p1, err := NewPlan(dir, PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p2, err := NewPlan(dir, PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p1.Image != p2.Image {
		t.Errorf("same definition planned %q then %q", p1.Image, p2.Image)
	}
	if err := os.WriteFile(filepath.Join(dir, ".devcontainer", "Dockerfile"), []byte("FROM aileron/sandbox-base:"+BaseVersion+"\nRUN true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p3, err := NewPlan(dir, PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p3.Image == p1.Image {
		t.Errorf("changed Dockerfile kept image %q", p1.Image)
	}
}

func TestDockerfileFroms(t *testing.T) {
	tests := []struct {
		name string
		df   string
		args map[string]string
		want []string
	}{
		{"plain", "FROM debian:bookworm-slim\nRUN x", nil, []string{"debian:bookworm-slim"}},
		{"platform flag and lowercase", "from --platform=$BUILDPLATFORM golang:1 as build\nFROM build\nFROM scratch", nil, []string{"golang:1", "scratch"}},
		{"continuation and comment", "# FROM commented:1\nFROM \\\n  alpine:3\n", nil, []string{"alpine:3"}},
		{"arg default and override", "ARG V=1\nARG R\nFROM ${R:-repo}/img:$V\n", map[string]string{"V": "2"}, []string{"repo/img:2"}},
		{"arg after FROM is stage scoped", "FROM a:1\nARG X=b\nFROM $X\n", nil, []string{"a:1", ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := dockerfileFroms([]byte(tc.df), tc.args); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("dockerfileFroms(%q) = %q, want %q", tc.df, got, tc.want)
			}
		})
	}
}

func TestSameImage(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"aileron/sandbox-base:0.1.0", "localhost/aileron/sandbox-base:0.1.0", true},
		{"aileron/sandbox-base:0.1.0", "docker.io/aileron/sandbox-base:0.1.0", true},
		{"debian", "docker.io/library/debian:latest", true},
		{"debian:12", "index.docker.io/library/debian:12", true},
		{"aileron/sandbox-base:0.1.0", "aileron/sandbox-base:0.1.1", false},
		{"localhost:5000/a:1", "a:1", false},
	}
	for _, tc := range tests {
		if got := sameImage(tc.a, tc.b); got != tc.want {
			t.Errorf("sameImage(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestImageSlug(t *testing.T) {
	for in, want := range map[string]string{"/x/My Project": "my-project", "/x/__": "project", "/x/a.b_c": "a-b-c", "/x/" + strings.Repeat("a", 50): strings.Repeat("a", 40)} {
		if got := imageSlug(in); got != want {
			t.Errorf("imageSlug(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestTierNames(t *testing.T) {
	for tier, want := range map[Tier]string{TierUnset: "-1 (unset)", TierBase: "0 (base)", TierDevcontainer: "1 (devcontainer)", TierImage: "2 (image)"} {
		if got := tier.String(); got != want {
			t.Errorf("Tier(%d).String() = %q, want %q", int(tier), got, want)
		}
	}
}

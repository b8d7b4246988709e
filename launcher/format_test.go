package launcher

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
	"github.com/aileron-dev/aileron-proxy/launcher/devcontainer"
)

// normalize replaces the temp project dir and content digests.
func normalize(s, dir string) string {
	s = strings.ReplaceAll(s, dir, "$PROJECT")
	s = regexp.MustCompile(`sha256:[0-9a-f]{12,64}`).ReplaceAllString(s, "sha256:<digest>")
	s = regexp.MustCompile(`(aileron/sandbox-[a-z0-9-]+):[0-9a-f]{12}\b`).ReplaceAllString(s, "$1:<digest>")
	s = regexp.MustCompile(`"devcontainer_id": "[0-9a-v]{52}"`).ReplaceAllString(s, `"devcontainer_id": "<id>"`)
	return strings.ReplaceAll(s, BaseVersion, "<version>")
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	testkit.Golden(t, filepath.Join("testdata", name+".golden"), []byte(got))
}

func TestPlanOutputGolden(t *testing.T) {
	projects := []struct {
		name  string
		files map[string]string
		rt    RuntimeInfo
	}{
		{"tier0", nil, RuntimeInfo{Kind: "docker", Selection: "auto: the Docker engine answered (server 20.10.24)"}},
		{"tier1", map[string]string{
			devcontainer.Path: `{
  // JSONC with comments and trailing commas
  "build": {"dockerfile": "Dockerfile", "context": "..", "args": {"B": "2", "A": "1",},},
  "containerEnv": {"EDITOR": "vi", "PAGER": "less",},
  "shutdownAction": "none",
  "customizations": {"aileron": {"approval_surface": "cli",},},
}`,
			".devcontainer/Dockerfile": "FROM aileron/sandbox-base:" + BaseVersion + "\n",
		}, RuntimeInfo{Kind: "podman", Selection: "--runtime podman"}},
		{"tier2", map[string]string{
			devcontainer.Path: `{"customizations": {"aileron": {"image": "ghcr.io/acme/agent:2026-05-29", "mediation": "default"}}}`,
		}, RuntimeInfo{Selection: "choosing a container runtime: docker not found on PATH, and podman is not installed (start Docker or install Podman)"}},
	}
	for _, pr := range projects {
		t.Run(pr.name, func(t *testing.T) {
			dir := writeProject(t, pr.files)
			p, err := NewPlan(dir, PlanOptions{})
			if err != nil {
				t.Fatalf("NewPlan: %v", err)
			}
			var text, js bytes.Buffer
			if err := WritePlanText(&text, p, pr.rt); err != nil {
				t.Fatal(err)
			}
			if err := WritePlanJSON(&js, p, pr.rt); err != nil {
				t.Fatal(err)
			}
			var decoded map[string]any
			if err := json.Unmarshal(js.Bytes(), &decoded); err != nil {
				t.Fatalf("plan JSON does not parse: %v", err)
			}
			if int(decoded["tier"].(float64)) != p.Tier.Number() {
				t.Errorf("JSON tier = %v, want %d", decoded["tier"], p.Tier.Number())
			}
			golden(t, "plan-"+pr.name+".txt", normalize(text.String(), dir))
			golden(t, "plan-"+pr.name+".json", normalize(js.String(), dir))
		})
	}
}

package launcher

import (
	"github.com/aileron-dev/aileron-proxy/launcher/devcontainer"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInitScaffoldsAPlannableStarter(t *testing.T) {
	dir := t.TempDir()
	written, err := Init(dir, InitOptions{})
	if err != nil {
		t.Fatalf("Init: %v", err)
	}
	want := []string{filepath.Join(dir, ".devcontainer", "devcontainer.json"), filepath.Join(dir, ".devcontainer", "Dockerfile")}
	if strings.Join(written, "\n") != strings.Join(want, "\n") {
		t.Errorf("Init wrote %q, want %q", written, want)
	}
	dc, err := os.ReadFile(want[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(dc), "//") || !strings.Contains(string(dc), ",\n  },") {
		t.Errorf("devcontainer.json should carry comments and trailing commas (JSONC):\n%s", dc)
	}
	df, err := os.ReadFile(want[1])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(df), "\nFROM "+BaseImage("")+"\n") {
		t.Errorf("Dockerfile does not extend %s:\n%s", BaseImage(""), df)
	}
	for _, tool := range []string{"gh", "nodejs", "python3", "kubectl"} {
		if !strings.Contains(string(df), "# RUN") || !strings.Contains(string(df), tool) {
			t.Errorf("Dockerfile has no commented snippet for %s", tool)
		}
	}
	// The starter is a valid tier 1 plan extending the base.
	p, err := NewPlan(dir, PlanOptions{})
	if err != nil {
		t.Fatalf("NewPlan(starter): %v", err)
	}
	if p.Tier != TierDevcontainer || p.Build == nil || !p.Build.ExtendsBase || len(p.Warnings) != 0 {
		t.Errorf("starter plan = %+v (build %+v), want tier 1 extending the base without warnings", p, p.Build)
	}
	if p.Mediation != devcontainer.MediationDefault || p.ApprovalSurface != devcontainer.ApprovalSurfaceBoth {
		t.Errorf("starter settings = %q/%q", p.Mediation, p.ApprovalSurface)
	}
}

func TestInitRefusesToOverwriteWithoutForce(t *testing.T) {
	dir := t.TempDir()
	dfPath := filepath.Join(dir, ".devcontainer", "Dockerfile")
	if err := os.MkdirAll(filepath.Dir(dfPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dfPath, []byte("FROM mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Init(dir, InitOptions{})
	if err == nil || !strings.Contains(err.Error(), ".devcontainer/Dockerfile already exists; pass --force to overwrite") {
		t.Fatalf("Init over an existing Dockerfile: err = %v, want a refusal naming it and --force", err)
	}
	if got, _ := os.ReadFile(dfPath); string(got) != "FROM mine\n" {
		t.Errorf("Dockerfile changed to %q without --force", got)
	}
	if _, err := os.Stat(filepath.Join(dir, ".devcontainer", "devcontainer.json")); !os.IsNotExist(err) {
		t.Errorf("devcontainer.json written despite the refusal (stat err %v)", err)
	}
	if _, err := Init(dir, InitOptions{Force: true}); err != nil {
		t.Fatalf("Init --force: %v", err)
	}
	if got, _ := os.ReadFile(dfPath); !strings.Contains(string(got), "FROM "+BaseImage("")) {
		t.Errorf("Init --force left %q", got)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, ".devcontainer"))
	if len(entries) != 2 {
		t.Errorf(".devcontainer holds %d entries after --force, want 2 (no temp files left)", len(entries))
	}
}

func TestBaseDockerfileContract(t *testing.T) {
	df := string(BaseDockerfile())
	for _, want := range []string{
		"FROM debian:bookworm-slim\n",
		"apt-get install -y --no-install-recommends ca-certificates curl wget",
		"rm -rf /var/lib/apt/lists/*",
		"--uid 1000",
		" agent",
		"mkdir -p /home/agent/workspace",
		"USER agent\n",
		"WORKDIR /home/agent/workspace\n",
	} {
		if !strings.Contains(df, want) {
			t.Errorf("embedded sandbox-base Dockerfile lacks %q", want)
		}
	}
	for _, runtime := range []string{"nodejs", "python", "golang", "openjdk"} {
		if strings.Contains(df, runtime) {
			t.Errorf("embedded sandbox-base Dockerfile installs a language runtime (%s)", runtime)
		}
	}
}

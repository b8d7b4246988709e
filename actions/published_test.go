package actions

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// published is the directory of Aileron's published google manifests.
var published = filepath.Join("testdata", "aileron-connector-google")

// publishedConnectors installs the spec written for the published
// manifests into a store under a temporary home and returns the active
// connectors, whose Hash is the store's package digest.
func publishedConnectors(t *testing.T) []policy.Connector {
	t.Helper()
	st, err := policy.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Install(filepath.Join(published, "connector.aileron.connector.v1.json"), policy.InstallOptions{}); err != nil {
		t.Fatalf("installing the spec for the published manifests: %v", err)
	}
	res, err := st.Load()
	if err != nil || len(res.Active) != 1 || !strings.HasPrefix(res.Active[0].Hash, "sha256:") {
		t.Fatalf("Load() = %+v, %v; want the one connector with its digest", res, err)
	}
	return res.Active
}

// TestPublishedManifestsInstall installs every published manifest
// unchanged: all 21 become active, each placeholder hash is a warning (not
// an error) and the published keys carry their meaning.
func TestPublishedManifestsInstall(t *testing.T) {
	conns := publishedConnectors(t)
	files, _ := filepath.Glob(filepath.Join(published, "actions", "*", FileName))
	if len(files) != 21 {
		t.Fatalf("found %d published manifests, want 21", len(files))
	}
	s, _ := OpenStore(t.TempDir())
	got, warnings, err := s.Install(published, conns)
	if err != nil {
		t.Fatalf("Install(published) = %v, want every manifest installed", err)
	}
	if len(got) != 21 {
		t.Fatalf("Install(published) = %d entries, want 21", len(got))
	}
	byName := map[string]*Action{}
	for _, e := range got {
		if !e.IsActive() {
			t.Errorf("%s: status %q, want ok", e.Action.Name, e.Status)
		}
		byName[e.Action.Name] = e.Action
	}
	placeholders := 0
	for _, w := range warnings {
		switch {
		case strings.Contains(w.Message, `"sha256:bound-at-release" is a placeholder`) && strings.HasSuffix(w.Path, FileName):
			placeholders++
		default:
			t.Errorf("unexpected warning %s", w)
		}
		if !w.IsWarning() || w.Line < 2 {
			t.Errorf("warning %s: want a warning with its line", w)
		}
	}
	if placeholders != 21 {
		t.Errorf("warnings: %d placeholder hashes, want 21 (and no warning about move-file's preview, which is fetched)", placeholders)
	}
	body := byName["send-email"].Inputs[2]
	if body.Name != "body" || body.Label != "Body" || !body.Multiline {
		t.Errorf("send-email input 3 = %+v, want body labelled Body, multiline", body)
	}
	if to := byName["send-email"].Inputs[0]; to.Label != "To" || to.Multiline || to.DisplayName() != "To" {
		t.Errorf("send-email input 1 = %+v, want label To, single line", to)
	}
	if in := byName["update-doc"].Inputs[1]; in.ItemsType != policy.InputObject {
		t.Errorf("update-doc requests = %+v, want items_type object", in)
	}
	if pv := byName["move-file"].Preview; pv == nil || pv.Op != "get_file_metadata" || pv.Args["file_id"] != "${args.file_id}" || pv.Render["Name"] != "name" {
		t.Errorf("move-file preview = %+v", pv)
	}
	if r := byName["send-email"].Requires[0]; r.Name != "github://ALRubinger/aileron-connector-google" || r.Hash != "" {
		t.Errorf("send-email requires = %+v, want the FQN and no digest (a placeholder)", r)
	}
}

// withHash returns the published send-email manifest with its placeholder
// hash replaced by hash, written to a new file.
func withHash(t *testing.T, hash string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(published, "actions", "send-email", FileName))
	if err != nil {
		t.Fatal(err)
	}
	out := strings.Replace(string(data), `"sha256:bound-at-release"`, `"`+hash+`"`, 1)
	if out == string(data) {
		t.Fatal("send-email has no placeholder hash to replace")
	}
	p := filepath.Join(t.TempDir(), FileName)
	if err := os.WriteFile(p, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRequiredDigest: a real digest other than the installed connector's
// is refused, naming both; the installed one's (in any case) is accepted
// without a warning.
func TestRequiredDigest(t *testing.T) {
	conns := publishedConnectors(t)
	installed := conns[0].Hash
	wrong := fmt.Sprintf("sha256:%x", sha256.Sum256([]byte("another package")))
	s, _ := OpenStore(t.TempDir())
	_, _, err := s.Install(withHash(t, wrong), conns)
	if err == nil {
		t.Fatal("Install with a digest that is not the installed connector's succeeded, want it refused")
	}
	for _, want := range []string{":19: ", wrong, installed, `connector "github://ALRubinger/aileron-connector-google" is installed as`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Install error = %q, want it to contain %q", err, want)
		}
	}
	if list, _ := s.List(conns); len(list) != 0 {
		t.Errorf("the refused manifest was installed: %+v", list)
	}
	got, warnings, err := s.Install(withHash(t, "sha256:"+strings.ToUpper(strings.TrimPrefix(installed, "sha256:"))), conns)
	if err != nil || len(got) != 1 || !got[0].IsActive() {
		t.Fatalf("Install with the installed connector's digest = %+v, %v; want it active", got, err)
	}
	if len(warnings) != 0 {
		t.Errorf("Install with a matching digest warned: %v", warnings)
	}
	if h := got[0].Action.Requires[0].Hash; h != installed {
		t.Errorf("Requires[0].Hash = %q, want %q (lower case)", h, installed)
	}
}

// TestEveryProblemInOnePass golden-checks a manifest with five problems of
// different kinds, two of which need the installed connectors: all five
// come out of one validation, sorted by line.
func TestEveryProblemInOnePass(t *testing.T) {
	conns := testConnectors(t)
	conns[0].Hash = fmt.Sprintf("sha256:%x", sha256.Sum256([]byte("the installed package")))
	data, err := os.ReadFile(filepath.Join("testdata", "five-problems.md"))
	if err != nil {
		t.Fatal(err)
	}
	a, _, problems := Inspect(data, conns)
	if a == nil {
		t.Fatal("Inspect returned no action for TOML that decodes")
	}
	var b strings.Builder
	for i, p := range problems {
		if p.IsWarning() {
			t.Errorf("%v is a warning, want errors only", p)
		}
		if i > 0 && problems[i-1].Line >= p.Line {
			t.Errorf("problems not sorted by line: %v before %v", problems[i-1], p)
		}
		b.WriteString(p.String() + "\n")
	}
	if len(problems) != 5 {
		t.Errorf("Inspect found %d problems, want 5:\n%s", len(problems), b.String())
	}
	testkit.Golden(t, filepath.Join("testdata", "five-problems.golden"), []byte(b.String()))
}

func TestMergeItemsType(t *testing.T) {
	a := &Action{Name: "n", Inputs: []Input{{Name: "requests", Type: policy.InputArray, ItemsType: policy.InputObject}}}
	if _, problems := a.Merge(map[string]any{"requests": []any{map[string]any{}, "x"}}); len(problems) != 1 || !strings.Contains(problems[0].Message, "element 1 must be an object") {
		t.Errorf("Merge(array with a string) = %v, want element 1 refused", problems)
	}
	if _, problems := a.Merge(map[string]any{"requests": []any{map[string]any{}}}); len(problems) != 0 {
		t.Errorf("Merge(array of objects) = %v, want accepted", problems)
	}
}

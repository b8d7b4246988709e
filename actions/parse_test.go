package actions

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

func TestParseExample(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "send-email.md"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := Parse(data)
	if err != nil {
		t.Fatalf("Parse(send-email.md) = %v, want no error", err)
	}
	if a.Name != "send-email" || a.Version != "0.3.0" || !a.ApprovalRequired || a.Intent == "" {
		t.Errorf("Parse(send-email.md) = %+v, want name send-email 0.3.0 with approval and intent", a)
	}
	if a.Execute.Connector != "github://acme/aileron-connector-google" || a.Execute.Op != "gmail.messages.send" {
		t.Errorf("execute = %+v", a.Execute)
	}
	if got := a.Execute.Args["format"]; got != "raw" {
		t.Errorf("execute.args.format = %v, want raw", got)
	}
	if !strings.HasPrefix(a.Description, "# Send an Email") {
		t.Errorf("Description = %q, want the Markdown body", a.Description)
	}
	if got := a.Line("execute[0].op"); got != 17 {
		t.Errorf("Line(execute[0].op) = %d, want 17 (the opening +++ is line 1)", got)
	}
	target, problems := a.Check(testConnectors(t))
	if len(problems) > 0 || target.Tool != "google" || target.Operation.Name != "gmail.messages.send" {
		t.Errorf("Check = %+v, %v; want tool google, no problems", target, problems)
	}
}

// TestValidationErrors golden-checks the problems of every manifest in
// testdata/invalid: each file exercises one kind of error.
func TestValidationErrors(t *testing.T) {
	conns := testConnectors(t)
	files, err := filepath.Glob(filepath.Join("testdata", "invalid", "*.md"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata/invalid/*.md: %v", err)
	}
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		_, _, problems := Inspect(data, conns)
		if !HasErrors(problems) {
			t.Errorf("%s: no problems, want at least one", f)
		}
		b.WriteString("== " + filepath.Base(f) + "\n")
		for _, p := range problems {
			if p.Line < 1 || p.Line > strings.Count(string(data), "\n")+1 {
				t.Errorf("%s: %v has a line outside the file", f, p)
			}
			b.WriteString(p.String() + "\n")
		}
	}
	testkit.Golden(t, filepath.Join("testdata", "invalid.golden"), []byte(b.String()))
}

func TestPresetsAreJSONNumbers(t *testing.T) {
	a, err := Parse([]byte("+++\nname = \"n\"\n[[execute]]\nconnector = \"github://a/b\"\nop = \"o\"\n[execute.args]\ni = 3\nf = 1.5\nl = [1, \"x\"]\n+++\n"))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(a.Execute.Args)
	if string(got) != `{"f":1.5,"i":3,"l":[1,"x"]}` {
		t.Errorf("args = %s", got)
	}
	if a.Execute.Args["i"] != json.Number("3") {
		t.Errorf("args.i = %#v, want json.Number(\"3\")", a.Execute.Args["i"])
	}
}

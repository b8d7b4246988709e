package devcontainer

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

const jsoncFull = `// A project devcontainer, JSON with comments.
{
  /* block comment */
  "name": "demo",
  "image": "ignored:when-build-is-set",
  "build": {
    "dockerfile": "Dockerfile", // relative to .devcontainer/
    "context": "..",
    "args": {"NODE_MAJOR": "20", "EMPTY": "",},
  },
  "containerEnv": {
    "EDITOR": "vi",
  },
  "features": {"ghcr.io/devcontainers/features/node:1": {}},
  "customizations": {
    "vscode": {"extensions": ["golang.go"]},
    "aileron": {
      "image": "ghcr.io/acme/agent:2026-05-29",
      "mediation": "default",
      "approval_surface": "cli", // trailing comma next
    },
  },
}
`

func TestParseDevContainerJSONC(t *testing.T) {
	dc, err := Parse("devcontainer.json", []byte(jsoncFull))
	if err != nil {
		t.Fatalf("ParseDevContainer: %v", err)
	}
	want := &DevContainer{
		Path:  "devcontainer.json",
		Image: "ignored:when-build-is-set",
		Build: &Build{
			Dockerfile: "Dockerfile",
			Context:    "..",
			Args:       map[string]string{"NODE_MAJOR": "20", "EMPTY": ""},
		},
		ContainerEnv: map[string]string{"EDITOR": "vi"},
		Aileron: AileronSettings{
			Image:           "ghcr.io/acme/agent:2026-05-29",
			Mediation:       MediationDefault,
			ApprovalSurface: ApprovalSurfaceCLI,
		},
		Features: []FeatureRef{{Ref: "ghcr.io/devcontainers/features/node:1", Options: map[string]string{}, Line: 14, Column: 16}},
	}
	if !reflect.DeepEqual(dc, want) {
		t.Errorf("ParseDevContainer =\n%+v\nwant\n%+v", dc, want)
	}
}

func TestParseDevContainerLegacyDockerFile(t *testing.T) {
	dc, err := Parse("dc.json", []byte(`{"dockerFile": "../Dockerfile", "context": "..", "build": {"target": "x"} ,}`))
	// "build" without a dockerfile is an error even with the legacy key.
	if err == nil {
		t.Fatalf("ParseDevContainer = %+v, want an error for build without dockerfile", dc)
	}
	dc, err = Parse("dc.json", []byte(`{"dockerFile": "../Dockerfile", "context": "..",}`))
	if err != nil {
		t.Fatalf("ParseDevContainer: %v", err)
	}
	want := &Build{Dockerfile: "../Dockerfile", Context: ".."}
	if !reflect.DeepEqual(dc.Build, want) {
		t.Errorf("Build = %+v, want %+v", dc.Build, want)
	}
}

func TestParseDevContainerErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		// want are substrings of the error, in order.
		want []string
	}{
		{
			name: "unknown aileron key",
			in:   "{\n  \"customizations\": {\"aileron\": {\n    \"imgae\": \"x\"}}}",
			want: []string{`dc.json:3:5: customizations.aileron.imgae: unknown key; customizations.aileron accepts "approval_surface", "image", "mediation"`},
		},
		{
			name: "bad mediation",
			in:   "{\"customizations\": {\"aileron\": {\"mediation\": \"strict\"}}}",
			want: []string{`dc.json:1:46: customizations.aileron.mediation: unsupported value "strict"; use one of "default"`},
		},
		{
			name: "bad approval surface",
			in:   "{\"customizations\": {\"aileron\": {\n\"approval_surface\": \"web\",}}}",
			want: []string{`dc.json:2:21: customizations.aileron.approval_surface: unsupported value "web"; use one of "api", "cli", "both"`},
		},
		{
			name: "approval surface not a string",
			in:   `{"customizations": {"aileron": {"approval_surface": true}}}`,
			want: []string{`customizations.aileron.approval_surface: must be a string, not a boolean`},
		},
		{
			name: "aileron not an object",
			in:   `{"customizations": {"aileron": "ghcr.io/x"}}`,
			want: []string{`customizations.aileron: must be an object with keys "approval_surface", "image", "mediation", not a string`},
		},
		{
			name: "empty aileron image",
			in:   `{"customizations": {"aileron": {"image": " "}}}`,
			want: []string{`customizations.aileron.image: must not be empty`},
		},
		{
			name: "image not a string",
			in:   `{"image": 3}`,
			want: []string{`dc.json:1:11: image: must be a string, not a number`},
		},
		{
			name: "containerEnv value not a string",
			in:   `{"containerEnv": {"A": "1", "B": 2}}`,
			want: []string{`containerEnv.B: must be a string, not a number`},
		},
		{
			name: "build without dockerfile",
			in:   `{"build": {"context": ".."}}`,
			want: []string{`build.dockerfile: is required when build is set`},
		},
		{
			name: "build.args not an object",
			in:   `{"build": {"dockerfile": "D", "args": ["A=1"]}}`,
			want: []string{`build.args: must be an object of string values, not an array`},
		},
		{
			name: "legacy and build conflict",
			in:   `{"dockerFile": "A", "build": {"dockerfile": "B"}}`,
			want: []string{`dockerFile: conflicts with build.dockerfile`},
		},
		{
			name: "top level array",
			in:   `[]`,
			want: []string{`dc.json:1:1: the top level must be an object, not an array`},
		},
		{
			name: "every problem is reported",
			in:   `{"image": 1, "customizations": {"aileron": {"mediation": "x", "extra": 1}}}`,
			want: []string{"image: must be a string", "\n", "customizations.aileron.mediation", "\n", "customizations.aileron.extra: unknown key"},
		},
		{
			name: "syntax error has line and column",
			in:   "{\n  \"image\": \"a\"\n  \"x\": 1\n}",
			want: []string{"parsing dc.json: hujson: line 3, column 3", "fix the syntax"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dc, err := Parse("dc.json", []byte(tc.in))
			if err == nil {
				t.Fatalf("ParseDevContainer(%q) = %+v, want an error", tc.in, dc)
			}
			msg := err.Error()
			rest := msg
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("ParseDevContainer(%q) error =\n%s\nwant it to contain (in order) %q", tc.in, msg, w)
				}
				rest = rest[i+len(w):]
			}
		})
	}
}

func TestConfigErrorIsTyped(t *testing.T) {
	_, err := Parse("dc.json", []byte(`{"customizations": {"aileron": {"mediation": "off"}}}`))
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v is not a *ConfigError", err)
	}
	if len(ce.Problems) != 1 || ce.Problems[0].Key != "customizations.aileron.mediation" || ce.Problems[0].Line != 1 {
		t.Errorf("Problems = %+v, want one at line 1 for customizations.aileron.mediation", ce.Problems)
	}

	// A dockerfile with a bad value is one problem, not also a missing one.
	for _, key := range []string{"dockerfile", "dockerFile"} {
		_, err := Parse("dc.json", []byte(`{"build": {"`+key+`": 5}}`))
		if !errors.As(err, &ce) || len(ce.Problems) != 1 || ce.Problems[0].Key != "build."+key {
			t.Errorf("ParseDevContainer(build.%s: 5) = %v, want one problem for build.%s", key, err, key)
		}
	}
}

func TestLineColumn(t *testing.T) {
	data := []byte("ab\ncd\n\nef")
	for _, tc := range []struct{ off, line, col int }{{0, 1, 1}, {1, 1, 2}, {3, 2, 1}, {7, 4, 1}, {8, 4, 2}, {99, 4, 3}} {
		if l, c := LineColumn(data, tc.off); l != tc.line || c != tc.col {
			t.Errorf("lineColumn(%d) = %d:%d, want %d:%d", tc.off, l, c, tc.line, tc.col)
		}
	}
}

// FuzzParseDevContainer: no panics, and a parse that succeeds holds only
// accepted values.
func FuzzParseDevContainer(f *testing.F) {
	f.Add([]byte(jsoncFull))
	f.Add([]byte(`{"dockerFile": "../Dockerfile", "context": "..",}`))
	f.Add([]byte(`{"build": {"dockerFile": 5}, "customizations": {"aileron": {"mediation": "x"}}}`))
	f.Add([]byte("{\n\"customizations\": {\"aileron\": {\n\"approval_surface\": \"web\",}}}"))
	f.Add([]byte(`{"image": "x", "runArgs": ["--memory", "1g", "--privileged", "-v", "/:/h"], "capAdd": ["X"], "privileged": true, "securityOpt": ["label=disable"]}`))
	f.Add([]byte(`{"image": "x", "mounts": ["source=/a,target=/b,type=bind,ro", {"type": "volume", "target": "/v"}], "workspaceMount": "source=/p,target=/w"}`))
	f.Add([]byte(`{"image": "x", "postCreateCommand": {"a": "echo", "b": ["ls", "-l"]}, "onCreateCommand": ["x"], "initializeCommand": "y"}`))
	f.Add([]byte(`{"image": "x", "features": {"./f": {"v": 1, "b": true}, "reg/x:1": "2", "reg/y": false}, "build": {"dockerfile": "D", "options": ["--pull", "--network=host"], "cacheFrom": ["c"]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		dc, err := Parse("dc.json", data)
		if err != nil {
			if dc != nil {
				t.Fatalf("ParseDevContainer(%q) = %+v with error %v", data, dc, err)
			}
			return
		}
		if dc.Build != nil && dc.Build.Dockerfile == "" {
			t.Errorf("ParseDevContainer(%q): build without a dockerfile", data)
		}
		if m := dc.Aileron.Mediation; m != "" && m != MediationDefault {
			t.Errorf("ParseDevContainer(%q): mediation %q", data, m)
		}
		if s := dc.Aileron.ApprovalSurface; s != "" && !slices.Contains(AcceptedApprovalSurface(), string(s)) {
			t.Errorf("ParseDevContainer(%q): approval surface %q", data, s)
		}
		// Only allow-listed run flags pass; every refusal says so.
		for _, a := range dc.RunArgs {
			name, _, _ := strings.Cut(a, "=")
			if !slices.Contains(AllowedRunArgs(), name) {
				t.Errorf("ParseDevContainer(%q): runArgs kept %q", data, a)
			}
		}
		for _, r := range dc.Refused {
			if r.Key == "" || !strings.HasPrefix(r.Message, "refused: ") {
				t.Errorf("ParseDevContainer(%q): refusal %+v without key or reason", data, r)
			}
		}
		for _, m := range dc.Mounts {
			if (m.Type != "bind" && m.Type != "volume") || m.Target == "" || (m.Type == "bind" && m.Source == "") {
				t.Errorf("ParseDevContainer(%q): mount %+v", data, m)
			}
		}
		for _, st := range dc.Lifecycle {
			if len(st.Commands) == 0 || !slices.Contains(LifecycleKeys, st.Key) {
				t.Errorf("ParseDevContainer(%q): lifecycle step %+v", data, st)
			}
		}
	})
}

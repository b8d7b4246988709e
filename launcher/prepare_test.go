package launcher

import (
	"context"
	"errors"
	"fmt"
	"github.com/aileron-dev/aileron-proxy/launcher/devcontainer"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"
)

// fakeRuntime is an in-memory Runtime: images is the local store.
type fakeRuntime struct {
	images  map[string]bool
	ops     []string
	builds  []runtime.BuildRequest
	runs    []runtime.RunRequest
	buildFn func(req runtime.BuildRequest) error
	runFn   func(req runtime.RunRequest) (int, error)
	pullErr error
}

var _ runtime.Runtime = (*fakeRuntime)(nil)

func (f *fakeRuntime) Kind() runtime.Kind { return runtime.Docker }
func (f *fakeRuntime) Selection() string  { return "fake" }
func (f *fakeRuntime) HostAlias() string  { return "host.docker.internal" }

func (f *fakeRuntime) Build(_ context.Context, req runtime.BuildRequest) error {
	f.ops = append(f.ops, "build "+req.Tag)
	if req.Dockerfile != "" {
		// Record the Dockerfile as it was at build time (BuildBase removes its temp dir).
		b, err := os.ReadFile(req.Dockerfile)
		if err != nil {
			return err
		}
		req.Labels = mergeLabels(req.Labels, map[string]string{"test.dockerfile": string(b)})
	}
	f.builds = append(f.builds, req)
	if f.buildFn != nil {
		if err := f.buildFn(req); err != nil {
			return err
		}
	}
	f.images[req.Tag] = true
	return nil
}

func mergeLabels(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func (f *fakeRuntime) ImageExists(_ context.Context, ref string) (bool, error) {
	f.ops = append(f.ops, "exists "+ref)
	return f.images[ref], nil
}

func (f *fakeRuntime) Pull(_ context.Context, ref string, _ io.Writer) error {
	f.ops = append(f.ops, "pull "+ref)
	if f.pullErr != nil {
		return f.pullErr
	}
	f.images[ref] = true
	return nil
}

func (f *fakeRuntime) Run(_ context.Context, req runtime.RunRequest) (int, error) {
	f.ops = append(f.ops, "run "+req.Image)
	f.runs = append(f.runs, req)
	if f.runFn != nil {
		return f.runFn(req)
	}
	return 0, nil
}

func (f *fakeRuntime) NetworkCreate(context.Context, runtime.NetworkRequest) (runtime.Network, error) {
	return runtime.Network{}, errors.New("not in the fake")
}
func (f *fakeRuntime) NetworkRemove(context.Context, string) error   { return nil }
func (f *fakeRuntime) ContainerRemove(context.Context, string) error { return nil }
func (f *fakeRuntime) ImageID(context.Context, string) (string, error) {
	return "feedfacefeedface", nil
}
func (f *fakeRuntime) Exec(context.Context, runtime.ExecRequest) (int, error) { return 0, nil }
func (f *fakeRuntime) Containers(context.Context, string) ([]runtime.Container, error) {
	return nil, nil
}

func TestPreparePolicies(t *testing.T) {
	base := BaseImage("")
	tier1 := map[string]string{
		devcontainer.Path:          `{"build": {"dockerfile": "Dockerfile"}}`,
		".devcontainer/Dockerfile": "FROM " + base + "\n",
	}
	tier1Other := map[string]string{
		devcontainer.Path:          `{"build": {"dockerfile": "Dockerfile"}}`,
		".devcontainer/Dockerfile": "FROM debian:bookworm-slim\n",
	}
	tier2 := map[string]string{devcontainer.Path: `{"customizations": {"aileron": {"image": "byo:1"}}}`}
	const project = "<project>"
	tests := []struct {
		name    string
		files   map[string]string
		policy  BuildPolicy
		present []string // images already local; project = the tier 1 image
		wantOps []string
		wantErr string
	}{
		{"tier0 auto missing", nil, BuildAuto, nil, []string{"exists " + base, "build " + base}, ""},
		{"tier0 auto present", nil, BuildAuto, []string{base}, []string{"exists " + base}, ""},
		{"tier0 always present", nil, BuildAlways, []string{base}, []string{"build " + base}, ""},
		{"tier0 never missing", nil, BuildNever, nil, []string{"exists " + base}, "sandbox build"},
		{"tier1 auto missing builds base first", tier1, BuildAuto, nil, []string{"exists " + project, "exists " + base, "build " + base, "build " + project}, ""},
		{"tier1 auto base present", tier1, BuildAuto, []string{base}, []string{"exists " + project, "exists " + base, "build " + project}, ""},
		{"tier1 auto present", tier1, BuildAuto, []string{project}, []string{"exists " + project}, ""},
		{"tier1 always rebuilds both", tier1, BuildAlways, []string{base, project}, []string{"build " + base, "build " + project}, ""},
		{"tier1 never present", tier1, BuildNever, []string{project}, []string{"exists " + project}, ""},
		{"tier1 never missing", tier1, BuildNever, []string{base}, []string{"exists " + project}, "--sandbox-build=auto"},
		{"tier1 not extending base", tier1Other, BuildAuto, nil, []string{"exists " + project, "build " + project}, ""},
		{"tier2 present", tier2, BuildAlways, []string{"byo:1"}, []string{"exists byo:1"}, ""},
		{"tier2 auto missing pulls", tier2, BuildAuto, nil, []string{"exists byo:1", "pull byo:1"}, ""},
		{"tier2 never missing", tier2, BuildNever, nil, []string{"exists byo:1"}, "forbids pulling"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPlan(writeProject(t, tc.files), PlanOptions{})
			if err != nil {
				t.Fatal(err)
			}
			rt := &fakeRuntime{images: map[string]bool{}}
			for _, img := range tc.present {
				rt.images[strings.ReplaceAll(img, project, p.Image)] = true
			}
			res, err := Prepare(context.Background(), rt, p, PrepareOptions{Policy: tc.policy})
			want := make([]string, len(tc.wantOps))
			for i, op := range tc.wantOps {
				want[i] = strings.ReplaceAll(op, project, p.Image)
			}
			if !reflect.DeepEqual(rt.ops, want) {
				t.Errorf("ops = %q, want %q", rt.ops, want)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Prepare err = %v, want it to contain %q", err, tc.wantErr)
				}
				if tc.policy == BuildNever && !errors.Is(err, ErrImageMissing) {
					t.Errorf("Prepare err = %v, want ErrImageMissing", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Prepare: %v", err)
			}
			if res.Image != p.Image || !rt.images[p.Image] {
				t.Errorf("Prepare = %+v; image present %v", res, rt.images[p.Image])
			}
		})
	}
}

func TestPrepareBuildsTheEmbeddedDefinitionAndLabels(t *testing.T) {
	p, err := NewPlan(writeProject(t, nil), PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rt := &fakeRuntime{images: map[string]bool{}}
	res, err := Prepare(context.Background(), rt, p, PrepareOptions{Policy: BuildAuto, Network: "host"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.Built, []string{p.BaseImage}) {
		t.Errorf("Built = %q", res.Built)
	}
	b := rt.builds[0]
	if b.Labels["test.dockerfile"] != string(BaseDockerfile()) {
		t.Errorf("built Dockerfile =\n%s\nwant the embedded definition", b.Labels["test.dockerfile"])
	}
	if b.Labels[LabelDefinition] != BaseDefinitionDigest() || b.Labels[LabelManaged] != "true" || b.Network != "host" {
		t.Errorf("build request = %+v", b)
	}
	if _, err := os.Stat(b.Context); !os.IsNotExist(err) {
		t.Errorf("temporary build context %s left behind", b.Context)
	}
}

func TestPrepareErrors(t *testing.T) {
	p, err := NewPlan(writeProject(t, map[string]string{
		devcontainer.Path:          `{"build": {"dockerfile": "Dockerfile"}}`,
		".devcontainer/Dockerfile": "FROM " + BaseImage("") + "\n",
	}), PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rt := &fakeRuntime{images: map[string]bool{}, buildFn: func(req runtime.BuildRequest) error {
		if req.Tag == BaseImage("") {
			return fmt.Errorf("building %s with fake: exit status 1", req.Tag)
		}
		return nil
	}}
	_, err = Prepare(context.Background(), rt, p, PrepareOptions{Policy: BuildAuto})
	if err == nil || !strings.Contains(err.Error(), "from the embedded definition") {
		t.Errorf("Prepare with a failing base build err = %v", err)
	}
	if n := len(rt.builds); n != 1 {
		t.Errorf("%d builds after the base failed, want 1 (the project image must not build)", n)
	}
	if _, err := Prepare(context.Background(), rt, p, PrepareOptions{}); err == nil {
		t.Errorf("Prepare with the zero policy succeeded")
	}
	if _, err := Prepare(context.Background(), rt, &Plan{Image: "x"}, PrepareOptions{Policy: BuildAuto}); err == nil {
		t.Errorf("Prepare of an unplanned Plan succeeded")
	}
	p2, err := NewPlan(writeProject(t, map[string]string{devcontainer.Path: `{"image": "nope:1"}`}), PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rt2 := &fakeRuntime{images: map[string]bool{}, pullErr: errors.New("pulling nope:1 with fake: exit status 1: registry unreachable")}
	if _, err := Prepare(context.Background(), rt2, p2, PrepareOptions{Policy: BuildAuto}); err == nil || !strings.Contains(err.Error(), "build or load it locally") {
		t.Errorf("Prepare with a failing pull err = %v", err)
	}
}

func TestParseBuildPolicy(t *testing.T) {
	for _, s := range []string{"auto", "always", "never"} {
		if p, err := ParseBuildPolicy(s); err != nil || p.String() != s {
			t.Errorf("ParseBuildPolicy(%q) = %q, %v", s, p, err)
		}
	}
	if _, err := ParseBuildPolicy(""); err == nil {
		t.Errorf("ParseBuildPolicy(\"\") succeeded; the zero policy must be invalid")
	}
}

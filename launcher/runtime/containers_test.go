package runtime

import (
	"context"
	"strings"
	"testing"
)

// Trimmed `container inspect` output of the two engines (the fields
// Containers reads, as the engines print them).
const (
	dockerInspectOne = `[{"Id":"aaa","Name":"/aileron-ses_1","State":{"Status":"running","Running":true},"Config":{"Labels":{"dev.aileron.managed":"true","dev.aileron.sandbox":"sbx_1"}}}]`
	podmanInspectOne = `[{"Id":"bbb","Name":"aileron-ses_1-guard","State":{"OciVersion":"1.0.2","Status":"exited","Running":false},"Config":{"Labels":{"dev.aileron.managed":"true","dev.aileron.session":"ses_1"}}}]`
)

func TestContainers(t *testing.T) {
	for _, tc := range []struct {
		kind    Kind
		inspect string
		want    Container
	}{
		{Docker, dockerInspectOne, Container{ID: "aaa", Name: "aileron-ses_1", Status: "running"}},
		{Podman, podmanInspectOne, Container{ID: "bbb", Name: "aileron-ses_1-guard", Status: "exited"}},
	} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			f := &fakeExec{respond: func(c Command) (string, string, error) {
				if c.Args[0] == "ps" {
					return tc.want.ID + "\n", "", nil
				}
				return tc.inspect, "", nil
			}}
			cs, err := newFakeRuntime(t, tc.kind, f).Containers(context.Background(), "dev.aileron.managed")
			if err != nil {
				t.Fatal(err)
			}
			if got := f.argv(0); got != string(tc.kind)+" ps --all --quiet --no-trunc --filter label=dev.aileron.managed" {
				t.Errorf("listing = %q", got)
			}
			if len(cs) != 1 || cs[0].ID != tc.want.ID || cs[0].Name != tc.want.Name || cs[0].Status != tc.want.Status || cs[0].Labels["dev.aileron.managed"] != "true" {
				t.Fatalf("Containers = %+v, want %+v with its labels", cs, tc.want)
			}
			if cs[0].IsRunning() != (tc.want.Status == "running") {
				t.Errorf("IsRunning = %v for status %s", cs[0].IsRunning(), cs[0].Status)
			}
		})
	}
}

// TestContainersOneGone: a container removed between ps and inspect is
// left out; another inspect error is an error.
func TestContainersOneGone(t *testing.T) {
	f := &fakeExec{respond: func(c Command) (string, string, error) {
		switch {
		case c.Args[0] == "ps":
			return "aaa\nzzz\n", "", nil
		case len(c.Args) == 4 && c.Args[2] == "aaa" && c.Args[3] == "zzz":
			return dockerInspectOne, "Error: No such container: zzz", &ExitError{Code: 1}
		case c.Args[2] == "aaa":
			return dockerInspectOne, "", nil
		}
		return "[]", "Error: No such container: zzz", &ExitError{Code: 1}
	}}
	cs, err := newFakeRuntime(t, Docker, f).Containers(context.Background(), "dev.aileron.managed")
	if err != nil || len(cs) != 1 || cs[0].ID != "aaa" {
		t.Fatalf("Containers = %+v, %v; want aaa alone", cs, err)
	}
	f = &fakeExec{respond: func(c Command) (string, string, error) {
		if c.Args[0] == "ps" {
			return "", "Cannot connect to the Docker daemon", &ExitError{Code: 1}
		}
		return "", "", nil
	}}
	if _, err := newFakeRuntime(t, Docker, f).Containers(context.Background(), "x"); err == nil || !strings.Contains(err.Error(), "Cannot connect") {
		t.Errorf("Containers with the engine down = %v, want its error", err)
	}
}

// FuzzParseContainerInspect: whatever a runtime prints, parsing it never
// panics, and a parsed container's state word is lower case (IsRunning
// compares it with "running").
func FuzzParseContainerInspect(f *testing.F) {
	f.Add(dockerInspectOne)
	f.Add(podmanInspectOne)
	f.Add(`[]`)
	f.Add(`[{"Name":"//x","State":{"Status":"Running"},"Config":{"Labels":null}}]`)
	f.Fuzz(func(t *testing.T, out string) {
		cs, err := parseContainerInspect(out)
		if err != nil {
			return
		}
		for _, c := range cs {
			if c.Status != strings.ToLower(c.Status) {
				t.Fatalf("parseContainerInspect(%q) kept the state %q as printed", out, c.Status)
			}
		}
	})
}

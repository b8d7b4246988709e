package shims

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/policy"
)

// listTree returns every path under dir with its mode, for comparisons.
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, rel+" "+fi.Mode().String())
		return nil
	})
	if err != nil {
		t.Fatalf("walking %s: %v", dir, err)
	}
	sort.Strings(out)
	return out
}

func renderTools(t *testing.T, tools ...policy.Tool) *Rendered {
	t.Helper()
	r, err := Render(RenderOptions{Connectors: []policy.Connector{fakeConnector("local://me/tools", tools...)}})
	if err != nil {
		t.Fatalf("Render = %v", err)
	}
	return r
}

func TestToolsWriteDir(t *testing.T) {
	parent := t.TempDir()
	out := filepath.Join(parent, "nested", "out")
	r := renderTools(t, tool("alpha", "a"), tool("beta", "b"))
	if err := WriteDir(out, r); err != nil {
		t.Fatalf("WriteDir(new) = %v", err)
	}
	want := []string{
		". drwxr-xr-x",
		"bin drwxr-xr-x",
		"bin/alpha -rwxr-xr-x",
		"bin/beta -rwxr-xr-x",
		"tools.txt -rw-r--r--",
	}
	if got := listTree(t, out); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("WriteDir tree =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got, _ := os.ReadFile(filepath.Join(out, ToolsFile)); !bytes.Equal(got, r.ToolsTxt) {
		t.Errorf("tools.txt = %q, want %q", got, r.ToolsTxt)
	}
	if got, _ := os.ReadFile(filepath.Join(out, BinDir, "alpha")); !bytes.Equal(got, r.Shims[0].Script) {
		t.Errorf("bin/alpha differs from the rendered script")
	}

	// A second render replaces the first: beta is gone, gamma appears.
	r2 := renderTools(t, tool("alpha", "a"), tool("gamma", "g"))
	if err := WriteDir(out, r2); err != nil {
		t.Fatalf("WriteDir(replace) = %v", err)
	}
	if got := strings.Join(listTree(t, out), "\n"); !strings.Contains(got, "bin/gamma") || strings.Contains(got, "bin/beta") {
		t.Errorf("after the second render the tree is\n%s", got)
	}
	if got, _ := os.ReadFile(filepath.Join(out, ToolsFile)); !bytes.Equal(got, r2.ToolsTxt) {
		t.Errorf("tools.txt after replace = %q, want %q", got, r2.ToolsTxt)
	}
	entries, _ := os.ReadDir(filepath.Join(parent, "nested"))
	if len(entries) != 1 {
		t.Errorf("WriteDir left temporary entries next to the output: %v", entries)
	}
}

func TestToolsWriteDirRefuses(t *testing.T) {
	good := renderTools(t, tool("alpha", "a"))
	tests := []struct {
		name    string
		prepare func(t *testing.T, out string)
		r       *Rendered
		want    string
	}{
		{
			name: "directory with foreign files",
			prepare: func(t *testing.T, out string) {
				mustWrite(t, filepath.Join(out, "notes.md"), "mine")
			},
			r: good, want: `refusing to replace it because it holds "notes.md"`,
		},
		{
			name: "bin with a subdirectory",
			prepare: func(t *testing.T, out string) {
				if err := os.MkdirAll(filepath.Join(out, "bin", "sub"), 0o755); err != nil {
					t.Fatal(err)
				}
			},
			r: good, want: `holds "bin/sub"`,
		},
		{
			name: "a file, not a directory",
			prepare: func(t *testing.T, out string) {
				if err := os.Remove(out); err != nil {
					t.Fatal(err)
				}
				mustWrite(t, out, "x")
			},
			r: good, want: "it exists and is not a directory",
		},
		{
			name: "unsafe shim name",
			r:    &Rendered{ToolsTxt: []byte("x\n"), Shims: []Shim{{Command: "../escape", Script: []byte("#!/bin/sh\n")}}},
			want: `shim command "../escape" is not a unique safe file name`,
		},
		{
			name: "duplicate shim name",
			r:    &Rendered{Shims: []Shim{{Command: "a"}, {Command: "a"}}},
			want: `shim command "a" is not a unique safe file name`,
		},
		{name: "nothing rendered", want: "nothing rendered"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			out := filepath.Join(parent, "out")
			if err := os.Mkdir(out, 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.prepare != nil {
				tc.prepare(t, out)
			}
			before := listTree(t, parent)
			err := WriteDir(out, tc.r)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("WriteDir = %v, want an error containing %q", err, tc.want)
			}
			if after := listTree(t, parent); strings.Join(after, "\n") != strings.Join(before, "\n") {
				t.Errorf("WriteDir changed the tree although it failed:\nbefore\n%s\nafter\n%s", strings.Join(before, "\n"), strings.Join(after, "\n"))
			}
		})
	}
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

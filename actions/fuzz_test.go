package actions

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse checks that any input parses or fails with a *ValidationError
// whose lines lie inside the file, never panicking, and that a parsed
// action checks against the test connector without panicking.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "invalid", "*.md"))
	files = append(files, filepath.Join("testdata", "send-email.md"), filepath.Join("testdata", "five-problems.md"))
	pub, _ := filepath.Glob(filepath.Join("testdata", "aileron-connector-google", "actions", "*", FileName))
	files = append(files, pub...)
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	conns := testConnectors(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		lines := 1
		for _, c := range data {
			if c == '\n' {
				lines++
			}
		}
		if _, _, problems := Inspect(data, conns); len(problems) > 0 {
			for _, p := range problems {
				if p.Line < 1 || p.Line > lines {
					t.Fatalf("Inspect: problem %q outside the file's %d lines", p, lines)
				}
			}
		}
		a, err := Parse(data)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) == 0 {
				t.Fatalf("Parse = %v, want a *ValidationError with problems", err)
			}
			for _, p := range ve.Problems {
				if p.Line < 1 || p.Line > lines {
					t.Fatalf("problem %q outside the file's %d lines", p, lines)
				}
			}
			return
		}
		if a.Name == "" || a.Execute.Connector == "" || a.Execute.Op == "" {
			t.Fatalf("Parse accepted an action without name, connector or op: %+v", a)
		}
		a.Check(conns)
	})
}

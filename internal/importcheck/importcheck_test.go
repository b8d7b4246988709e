package importcheck

import "testing"

// recorder captures failures instead of failing the test.
type recorder struct {
	testing.TB
	errors int
}

func (r *recorder) Helper()               {}
func (r *recorder) Errorf(string, ...any) { r.errors++ }

func TestForbid(t *testing.T) {
	r := &recorder{TB: t}
	Forbid(r, ".", map[string]string{"go/": "subtree", "testing": "exact", "strings/x": "not imported"})
	if r.errors != 2 {
		t.Errorf("Forbid reported %d imports, want go/build (subtree) and testing (exact)", r.errors)
	}
	r = &recorder{TB: t}
	Forbid(r, ".", map[string]string{"go": "a key without / is exact"})
	if r.errors != 0 {
		t.Errorf("an exact key matched a subtree: %d errors", r.errors)
	}
}

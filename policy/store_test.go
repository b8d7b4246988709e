package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

// storeSpec returns a valid spec document for fqn and version with one
// operation per tool name.
func storeSpec(fqn, version string, tools ...string) string {
	var ts []string
	for _, name := range tools {
		ts = append(ts, fmt.Sprintf(`{"name": %q, "operations": [{"name": "get", "method": "GET", "path": "/%s", "hosts": ["%s.example.com"]}]}`,
			name, strings.ToLower(name), strings.ToLower(name)))
	}
	v := ""
	if version != "" {
		v = fmt.Sprintf(`, "version": %q`, version)
	}
	return fmt.Sprintf(`{"schema_version": "aileron.connector.v1", "connector": {"fqn": %q%s}, "tools": [%s]}`, fqn, v, strings.Join(ts, ", "))
}

// writeStoreSpec writes doc to a new file and returns its path.
func writeStoreSpec(t *testing.T, doc string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "spec.json")
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func openTestStore(t *testing.T) (*Store, string) {
	t.Helper()
	home := t.TempDir()
	st, err := OpenStore(home)
	if err != nil {
		t.Fatalf("OpenStore() error: %v", err)
	}
	return st, home
}

func mustInstall(t *testing.T, st *Store, path string, opts InstallOptions) Installed {
	t.Helper()
	inst, err := st.Install(path, opts)
	if err != nil {
		t.Fatalf("Install(%s) error: %v", path, err)
	}
	return inst
}

// statuses maps "<fqn> <version>" (or the hash for invalid entries) to status.
func statuses(entries []Installed) map[string]string {
	out := map[string]string{}
	for _, e := range entries {
		if e.Spec == nil {
			out[e.Hash] = e.Status
			continue
		}
		out[describe(e)] = e.Status
	}
	return out
}

func tmpEntries(t *testing.T, st *Store) []string {
	t.Helper()
	ents, err := os.ReadDir(st.tmpDir())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestOpenStore(t *testing.T) {
	if _, err := OpenStore(""); err == nil || !strings.Contains(err.Error(), "set AILERON_HOME or pass --home") {
		t.Errorf("OpenStore(\"\") error = %v, want the fix named", err)
	}
	st, home := openTestStore(t)
	if want := filepath.Join(home, "store", "connectors"); st.Dir() != want {
		t.Errorf("Dir() = %q, want %q", st.Dir(), want)
	}
	res, err := st.Load()
	if err != nil || len(res.All) != 0 || len(res.Active) != 0 {
		t.Errorf("Load() on an empty home = %+v, %v; want empty, nil", res, err)
	}
	if _, err := os.Stat(st.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenStore and Load created %s; want nothing created before Install", st.Dir())
	}
}

func TestInstallSpecFile(t *testing.T) {
	st, home := openTestStore(t)
	doc := storeSpec("github://acme/one", "1.0.0", "one")
	path := writeStoreSpec(t, doc)
	inst := mustInstall(t, st, path, InstallOptions{})

	sum := sha256.New()
	sum.Write([]byte{0, 0, 0, 0, 0, 0, 0, byte(len(SpecFileName))})
	sum.Write([]byte(SpecFileName))
	sum.Write([]byte{0, 0, 0, 0, 0, 0, byte(len(doc) >> 8), byte(len(doc))})
	sum.Write([]byte(doc))
	wantHash := "sha256:" + hex.EncodeToString(sum.Sum(nil))
	if inst.Hash != wantHash {
		t.Errorf("Install() hash = %s, want %s", inst.Hash, wantHash)
	}
	wantDir := filepath.Join(home, "store", "connectors", "sha256", strings.TrimPrefix(wantHash, "sha256:"))
	if inst.Dir != wantDir || inst.Status != StatusOK || inst.Spec == nil || inst.Spec.Connector.FQN != "github://acme/one" {
		t.Errorf("Install() = %+v, want dir %s, status ok, the spec", inst, wantDir)
	}
	got, err := os.ReadFile(filepath.Join(wantDir, SpecFileName))
	if err != nil || string(got) != doc {
		t.Errorf("stored spec = %q, %v; want the installed bytes", got, err)
	}
	for _, p := range []string{filepath.Join(home, "store"), st.Dir(), st.hashDir(), wantDir} {
		if info, err := os.Stat(p); err != nil || info.Mode().Perm() != 0o700 {
			t.Errorf("mode of %s = %v, %v; want 0700", p, info.Mode().Perm(), err)
		}
	}
	if info, err := os.Stat(filepath.Join(wantDir, SpecFileName)); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("mode of the stored spec = %v, %v; want 0600", info.Mode().Perm(), err)
	}

	// Installing the same content again, from another path, is a no-op.
	again := mustInstall(t, st, writeStoreSpec(t, doc), InstallOptions{})
	if again.Hash != inst.Hash || again.Status != StatusOK {
		t.Errorf("second Install() = %+v, want the same entry", again)
	}
	list, err := st.List()
	if err != nil || len(list) != 1 {
		t.Errorf("List() = %d entries, %v; want 1", len(list), err)
	}
	if h, err := PackageHash(path); err != nil || h != inst.Hash {
		t.Errorf("PackageHash(spec file) = %s, %v; want %s", h, err, inst.Hash)
	}
	if h, err := PackageHash(wantDir); err != nil || h != inst.Hash {
		t.Errorf("PackageHash(store dir) = %s, %v; want %s", h, err, inst.Hash)
	}
}

func TestInstallPackageDir(t *testing.T) {
	st, _ := openTestStore(t)
	pkg := t.TempDir()
	doc := storeSpec("github://acme/pkg", "0.1.0", "pkg")
	files := map[string]string{
		SpecFileName:         doc,
		"README.md":          "# pkg\n",
		"docs/usage/long.md": strings.Repeat("x", 5000),
		"empty":              "",
	}
	for rel, content := range files {
		p := filepath.Join(pkg, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(pkg, "emptydir"), 0o755); err != nil {
		t.Fatal(err)
	}
	inst := mustInstall(t, st, pkg, InstallOptions{})
	for rel, content := range files {
		got, err := os.ReadFile(filepath.Join(inst.Dir, filepath.FromSlash(rel)))
		if err != nil || string(got) != content {
			t.Errorf("stored %s = %d bytes, %v; want %d bytes", rel, len(got), err, len(content))
		}
	}
	if h, _ := PackageHash(pkg); h != inst.Hash {
		t.Errorf("PackageHash(pkg) = %s, want %s", h, inst.Hash)
	}
	// Only content counts: a copy elsewhere, written in another order with
	// other modes and times, hashes the same; any content change does not.
	cp := t.TempDir()
	for _, rel := range []string{"empty", "docs/usage/long.md", "README.md", SpecFileName} {
		p := filepath.Join(cp, filepath.FromSlash(rel))
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, []byte(files[rel]), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if h, _ := PackageHash(cp); h != inst.Hash {
		t.Errorf("PackageHash(copy) = %s, want %s", h, inst.Hash)
	}
	os.WriteFile(filepath.Join(cp, "README.md"), []byte("# pkg!\n"), 0o600)
	if h, _ := PackageHash(cp); h == inst.Hash {
		t.Errorf("PackageHash() did not change with a file's content")
	}
	os.WriteFile(filepath.Join(cp, "README.md"), []byte(files["README.md"]), 0o600)
	os.Rename(filepath.Join(cp, "empty"), filepath.Join(cp, "empty2"))
	if h, _ := PackageHash(cp); h == inst.Hash {
		t.Errorf("PackageHash() did not change with a file's name")
	}
	// A lone spec file is the package holding just that file.
	lone := t.TempDir()
	os.WriteFile(filepath.Join(lone, SpecFileName), []byte(doc), 0o600)
	h1, _ := PackageHash(lone)
	h2, _ := PackageHash(filepath.Join(lone, SpecFileName))
	if h1 != h2 {
		t.Errorf("PackageHash(dir with only the spec) = %s, PackageHash(spec) = %s; want equal", h1, h2)
	}
}

// TestPackageHashDocumented recomputes the hash with the Python snippet of
// docs/store.md.
func TestPackageHashDocumented(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("python3 not found on PATH (required when CI=true): %v", err)
		}
		t.Skip("python3 not installed")
	}
	doc, err := os.ReadFile("../docs/store.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "```python\n")
	script, _, ok2 := strings.Cut(after, "```")
	if !ok || !ok2 {
		t.Fatal("docs/store.md has no ```python block")
	}
	pkg := t.TempDir()
	os.MkdirAll(filepath.Join(pkg, "a", "b"), 0o755)
	os.WriteFile(filepath.Join(pkg, SpecFileName), []byte(storeSpec("github://a/b", "", "t")), 0o644)
	os.WriteFile(filepath.Join(pkg, "a", "b", "c.txt"), []byte("c"), 0o644)
	os.WriteFile(filepath.Join(pkg, "a.txt"), []byte("aa"), 0o644)
	os.WriteFile(filepath.Join(pkg, "Z"), nil, 0o644)
	want, err := PackageHash(pkg)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-c", script, pkg)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != want {
		t.Errorf("documented algorithm = %s, PackageHash = %s", got, want)
	}
}

func TestInstallRefuses(t *testing.T) {
	st, _ := openTestStore(t)
	good := storeSpec("github://acme/x", "", "x")

	withSymlink := t.TempDir()
	os.WriteFile(filepath.Join(withSymlink, SpecFileName), []byte(good), 0o644)
	os.Symlink("/etc/passwd", filepath.Join(withSymlink, "passwd"))

	specIsSymlink := t.TempDir()
	os.Symlink("/etc/hostname", filepath.Join(specIsSymlink, SpecFileName))

	noSpec := t.TempDir()
	os.WriteFile(filepath.Join(noSpec, "spec.json"), []byte(good), 0o644)

	nestedSpec := t.TempDir()
	os.MkdirAll(filepath.Join(nestedSpec, "sub"), 0o755)
	os.WriteFile(filepath.Join(nestedSpec, "sub", SpecFileName), []byte(good), 0o644)

	withFIFO := t.TempDir()
	os.WriteFile(filepath.Join(withFIFO, SpecFileName), []byte(good), 0o644)
	if err := syscall.Mkfifo(filepath.Join(withFIFO, "pipe"), 0o600); err != nil {
		t.Fatal(err)
	}

	bigSpec := writeStoreSpec(t, good[:len(good)-1]+`, "x": "`+strings.Repeat("a", MaxSpecSize)+`"}`)

	tooBig := t.TempDir()
	os.WriteFile(filepath.Join(tooBig, SpecFileName), []byte(good), 0o644)
	os.WriteFile(filepath.Join(tooBig, "huge.bin"), make([]byte, MaxPackageFileSize+1), 0o644)

	tooMany := t.TempDir()
	os.WriteFile(filepath.Join(tooMany, SpecFileName), []byte(good), 0o644)
	for i := 0; i < MaxPackageFiles; i++ {
		os.WriteFile(filepath.Join(tooMany, fmt.Sprintf("f%04d", i)), nil, 0o644)
	}

	tests := []struct{ name, path, msg string }{
		{"missing path", filepath.Join(t.TempDir(), "nope.json"), "no such file or directory"},
		{"symlink in package", withSymlink, "passwd is a symbolic link; a package may only hold regular files"},
		{"spec is a symlink", specIsSymlink, "aileron.connector.v1.json is a symbolic link"},
		{"no spec at root", noSpec, "has no aileron.connector.v1.json at its root"},
		{"spec only nested", nestedSpec, "has no aileron.connector.v1.json at its root"},
		{"fifo in package", withFIFO, "pipe is not a regular file"},
		{"spec too large", bigSpec, "larger than the 4194304-byte limit"},
		{"file too large", tooBig, "huge.bin: huge.bin is larger than the 8388608-byte limit"},
		{"too many files", tooMany, "more than 1000 files"},
		{"not a file or dir", "/dev/null", "is neither a spec file nor a package directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := st.Install(tc.path, InstallOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("Install() error = %v, want it to contain %q", err, tc.msg)
			}
		})
	}
	if list, _ := st.List(); len(list) != 0 {
		t.Errorf("List() after refused installs = %v, want empty", list)
	}
}

func TestInstallInvalidSpecInstallsNothing(t *testing.T) {
	st, _ := openTestStore(t)
	bad := writeStoreSpec(t, `{"schema_version": "aileron.connector.v1", "connector": {"fqn": "github://a/b"}, "tools": [{"name": "x", "operations": [{"name": "o", "method": "FETCH", "hosts": ["https://x"]}]}]}`)
	_, err := st.Install(bad, InstallOptions{})
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 2 {
		t.Fatalf("Install(invalid) error = %v, want a *ValidationError with 2 problems", err)
	}
	_, err = st.Install(writeStoreSpec(t, `{"schema_version": `), InstallOptions{})
	var se *SyntaxError
	if !errors.As(err, &se) || se.Line != 1 {
		t.Errorf("Install(not JSON) error = %v, want a *SyntaxError", err)
	}
	if _, err := os.Stat(st.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("invalid installs created %s (%v); want nothing written", st.Dir(), err)
	}
}

func TestSupersede(t *testing.T) {
	st, _ := openTestStore(t)
	const fqn = "github://acme/multi"
	for _, v := range []string{"1.0.0", "", "1.10.0", "1.9.9", "1.10.0-rc.1"} {
		mustInstall(t, st, writeStoreSpec(t, storeSpec(fqn, v, "multi")), InstallOptions{})
	}
	other := mustInstall(t, st, writeStoreSpec(t, storeSpec("github://acme/other", "", "other")), InstallOptions{})
	list, err := st.List()
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, e := range list {
		order = append(order, describe(e)+" "+e.Status)
	}
	want := []string{
		fqn + " 1.10.0 ok",
		fqn + " 1.10.0-rc.1 superseded",
		fqn + " 1.9.9 superseded",
		fqn + " 1.0.0 superseded",
		fqn + " superseded",
		"github://acme/other ok",
	}
	if !reflect.DeepEqual(order, want) {
		t.Errorf("List() =\n%s\nwant\n%s", strings.Join(order, "\n"), strings.Join(want, "\n"))
	}
	res, err := st.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Active) != 2 || res.Active[0].Spec.Connector.Version != "1.10.0" || res.Active[1].Hash != other.Hash {
		t.Errorf("Load().Active = %v, want multi 1.10.0 and other", res.Active)
	}
	if len(res.Problems) != 0 {
		t.Errorf("Load().Problems = %q, want none for superseded versions", res.Problems)
	}
	// Installing an older version reports it superseded.
	old := mustInstall(t, st, writeStoreSpec(t, storeSpec(fqn, "0.1.0", "multi")), InstallOptions{})
	if old.Status != StatusSuperseded {
		t.Errorf("Install(older) status = %q, want superseded", old.Status)
	}
	// The matcher compiles what Load activates.
	if _, err := Compile(res.Active); err != nil {
		t.Errorf("Compile(Load().Active) error: %v", err)
	}
}

func TestSupersedeTieBreaksByHash(t *testing.T) {
	st, _ := openTestStore(t)
	a := mustInstall(t, st, writeStoreSpec(t, storeSpec("github://acme/tie", "2.0.0", "tie")), InstallOptions{})
	b := mustInstall(t, st, writeStoreSpec(t, strings.Replace(storeSpec("github://acme/tie", "2.0.0", "tie"), `"get"`, `"read"`, 1)), InstallOptions{})
	win, lose := a, b
	if b.Hash < a.Hash {
		win, lose = b, a
	}
	list, _ := st.List()
	got := map[string]string{}
	for _, e := range list {
		got[e.Hash] = e.Status
	}
	if got[win.Hash] != StatusOK || got[lose.Hash] != StatusSuperseded {
		t.Errorf("statuses = %v, want %s ok (smaller hash) and %s superseded", got, win.Hash, lose.Hash)
	}
}

func TestToolConflicts(t *testing.T) {
	st, _ := openTestStore(t)
	a := mustInstall(t, st, writeStoreSpec(t, storeSpec("github://acme/a", "1.0.0", "gh", "only-a")), InstallOptions{})
	c := mustInstall(t, st, writeStoreSpec(t, storeSpec("github://acme/c", "", "unrelated")), InstallOptions{})
	bPath := writeStoreSpec(t, storeSpec("github://acme/b", "", "GH"))
	_, err := st.Install(bPath, InstallOptions{})
	if !errors.Is(err, ErrToolConflict) {
		t.Fatalf("Install(conflicting) error = %v, want ErrToolConflict", err)
	}
	for _, want := range []string{`tool command "gh" is already provided by github://acme/a 1.0.0 (` + shortHash(a.Hash) + `)`,
		`"aileron-proxy connector remove github://acme/a"`, "--force"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Install(conflicting) error = %q, want it to contain %q", err, want)
		}
	}
	if list, _ := st.List(); len(list) != 2 {
		t.Errorf("List() after a refused install = %d entries, want 2", len(list))
	}
	// A new version of the same FQN is not a conflict with itself.
	mustInstall(t, st, writeStoreSpec(t, storeSpec("github://acme/a", "1.1.0", "gh")), InstallOptions{})

	b := mustInstall(t, st, bPath, InstallOptions{Force: true})
	if !strings.HasPrefix(b.Status, StatusConflictPrefix) {
		t.Errorf("Install(--force) status = %q, want conflict", b.Status)
	}
	res, err := st.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Active) != 1 || res.Active[0].Hash != c.Hash {
		t.Errorf("Load().Active = %v, want only the unrelated connector", res.Active)
	}
	st2 := statuses(res.All)
	if st2["github://acme/a 1.0.0"] != StatusSuperseded {
		t.Errorf("old version status = %q, want superseded (fail closed, no fallback)", st2["github://acme/a 1.0.0"])
	}
	for _, key := range []string{"github://acme/a 1.1.0", "github://acme/b"} {
		s := st2[key]
		for _, want := range []string{StatusConflictPrefix + `tool command "gh" is provided by github://acme/`, "github://acme/a 1.1.0 (sha256:", "github://acme/b (sha256:",
			"neither is active until one is removed with \"aileron-proxy connector remove "} {
			if !strings.Contains(s, want) {
				t.Errorf("%s status = %q, want it to contain %q", key, s, want)
			}
		}
	}
	if len(res.Problems) != 2 || !strings.Contains(res.Problems[0], "skipping connector github://acme/") {
		t.Errorf("Load().Problems = %q, want one line per conflicting connector", res.Problems)
	}
	// Removing one side resolves the conflict.
	if _, err := st.Remove("github://acme/b"); err != nil {
		t.Fatal(err)
	}
	if got := statuses(mustList(t, st))["github://acme/a 1.1.0"]; got != StatusOK {
		t.Errorf("status after removing the other side = %q, want ok", got)
	}
}

func mustList(t *testing.T, st *Store) []Installed {
	t.Helper()
	list, err := st.List()
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// plantEntry writes files straight into sha256/<name>, bypassing Install.
func plantEntry(t *testing.T, st *Store, name string, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(st.hashDir(), name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for rel, content := range files {
		if err := os.WriteFile(filepath.Join(dir, rel), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestInvalidEntriesAreSkipped(t *testing.T) {
	st, _ := openTestStore(t)
	good := mustInstall(t, st, writeStoreSpec(t, storeSpec("github://acme/good", "1.0.0", "good")), InstallOptions{})

	// A valid hash over an invalid spec (as if the rules got stricter).
	invalidDoc := `{"schema_version": "aileron.connector.v1", "connector": {"fqn": "github://a/b"}, "tools": [{"name": "bad tool", "operations": []}]}`
	invalidHash := hashFiles([]pkgFile{{rel: SpecFileName, data: []byte(invalidDoc)}})
	plantEntry(t, st, strings.TrimPrefix(invalidHash, "sha256:"), map[string]string{SpecFileName: invalidDoc})
	// Content that does not match its directory name.
	// Its spec has the tool name of the good connector, which must stay
	// active: invalid entries never take part in conflicts.
	plantEntry(t, st, strings.Repeat("ab", 32), map[string]string{SpecFileName: storeSpec("github://acme/evil", "", "good")})
	// No spec at all, and a file where a directory should be.
	plantEntry(t, st, strings.Repeat("cd", 32), map[string]string{"README": "x"})
	os.WriteFile(filepath.Join(st.hashDir(), strings.Repeat("ef", 32)), []byte("x"), 0o600)
	// Not an entry name at all.
	os.MkdirAll(filepath.Join(st.hashDir(), "junk"), 0o700)

	res, err := st.Load()
	if err != nil {
		t.Fatalf("Load() error: %v", err)
	}
	if len(res.Active) != 1 || res.Active[0].Hash != good.Hash {
		t.Errorf("Load().Active = %v, want only the good connector", res.Active)
	}
	got := statuses(res.All)
	want := map[string]string{
		"sha256:" + strings.Repeat("ab", 32): `invalid: content does not match its hash`,
		"sha256:" + strings.Repeat("cd", 32): `invalid: unreadable: ` + filepath.Join(st.hashDir(), strings.Repeat("cd", 32)) + ` has no aileron.connector.v1.json at its root`,
		"sha256:" + strings.Repeat("ef", 32): `invalid: not a package directory; remove it with "aileron-proxy connector remove sha256:efef`,
		invalidHash:                          `invalid: tools[0].name: "bad tool" may only contain letters, digits, '.', '_', ':' and '-' (and 1 more); see all problems with "aileron-proxy connector validate `,
		"github://acme/good 1.0.0":           StatusOK,
	}
	if len(got) != len(want) {
		t.Errorf("List() = %v, want %d entries", got, len(want))
	}
	for k, w := range want {
		if !strings.HasPrefix(got[k], w) {
			t.Errorf("status of %s = %q, want prefix %q", k, got[k], w)
		}
	}
	if res.All[0].Hash != good.Hash {
		t.Errorf("List()[0] = %s, want valid entries before invalid ones", res.All[0].Hash)
	}
	joined := strings.Join(res.Problems, "\n")
	for _, w := range []string{"ignoring " + filepath.Join(st.hashDir(), "junk"), "skipping connector " + invalidHash, "skipping connector sha256:" + strings.Repeat("ab", 32)} {
		if !strings.Contains(joined, w) {
			t.Errorf("Load().Problems = %q, want a line containing %q", res.Problems, w)
		}
	}
	// Invalid entries can be removed by hash.
	removed, err := st.Remove("sha256:" + strings.Repeat("ab", 32))
	if err != nil || len(removed) != 1 {
		t.Errorf("Remove(tampered) = %v, %v", removed, err)
	}
}

func TestReinstallRepairsDamagedEntry(t *testing.T) {
	st, _ := openTestStore(t)
	path := writeStoreSpec(t, storeSpec("github://acme/fix", "", "fix"))
	inst := mustInstall(t, st, path, InstallOptions{})
	if err := os.WriteFile(filepath.Join(inst.Dir, SpecFileName), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s := mustList(t, st)[0].Status; !strings.HasPrefix(s, "invalid: content does not match its hash") {
		t.Fatalf("status of the damaged entry = %q", s)
	}
	again := mustInstall(t, st, path, InstallOptions{})
	if again.Status != StatusOK || again.Hash != inst.Hash {
		t.Errorf("Install() over a damaged entry = %+v, want it repaired", again)
	}
}

func TestRemove(t *testing.T) {
	st, _ := openTestStore(t)
	v1 := mustInstall(t, st, writeStoreSpec(t, storeSpec("github://acme/r", "1.0.0", "r")), InstallOptions{})
	v2 := mustInstall(t, st, writeStoreSpec(t, storeSpec("github://acme/r", "2.0.0", "r")), InstallOptions{})
	v3 := mustInstall(t, st, writeStoreSpec(t, storeSpec("github://acme/r", "3.0.0", "r")), InstallOptions{})
	keep := mustInstall(t, st, writeStoreSpec(t, storeSpec("github://acme/keep", "", "keep")), InstallOptions{})

	removed, err := st.Remove("github://acme/r@2.0.0")
	if err != nil || len(removed) != 1 || removed[0].Hash != v2.Hash {
		t.Errorf("Remove(fqn@version) = %v, %v; want v2", removed, err)
	}
	removed, err = st.Remove(shortHash(v3.Hash)[:len("sha256:")+8])
	if err != nil || len(removed) != 1 || removed[0].Hash != v3.Hash {
		t.Errorf("Remove(short hash) = %v, %v; want v3", removed, err)
	}
	if got := statuses(mustList(t, st))["github://acme/r 1.0.0"]; got != StatusOK {
		t.Errorf("after removing newer versions, 1.0.0 status = %q, want ok", got)
	}
	mustInstall(t, st, writeStoreSpec(t, storeSpec("github://acme/r", "4.0.0", "r")), InstallOptions{})
	removed, err = st.Remove("github://acme/r")
	if err != nil || len(removed) != 2 {
		t.Errorf("Remove(fqn) = %v, %v; want both remaining versions", removed, err)
	}
	if _, err := os.Stat(v1.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still exists after Remove", v1.Dir)
	}
	list := mustList(t, st)
	if len(list) != 1 || list[0].Hash != keep.Hash {
		t.Errorf("List() after removals = %v, want only keep", list)
	}
	removed, err = st.Remove(strings.ToUpper(keep.Hash[len("sha256:"):]))
	if err == nil {
		t.Errorf("Remove(bare hex) = %v, want an error (not an FQN)", removed)
	}
	if _, err := st.Remove("sha256:" + strings.ToUpper(keep.Hash[len("sha256:"):])); err != nil {
		t.Errorf("Remove(upper-case hash) error: %v", err)
	}
	if got := tmpEntries(t, st); len(got) != 0 {
		t.Errorf("tmp/ after removals = %v, want empty", got)
	}

	errs := []struct{ ref, msg string }{
		{"github://acme/none", `removing "github://acme/none": no installed connector matches; run "aileron-proxy connector list"`},
		{"sha256:" + strings.Repeat("0", 64), "no installed connector matches"},
		{"sha256:abc", "a hash reference is sha256: followed by 8 to 64 hex digits"},
		{"sha256:xyz12345", "a hash reference is sha256: followed by 8 to 64 hex digits"},
		{"nonsense", `removing "nonsense": it is neither a connector FQN nor sha256:<hex>`},
	}
	for _, tc := range errs {
		_, err := st.Remove(tc.ref)
		if err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("Remove(%q) error = %v, want it to contain %q", tc.ref, err, tc.msg)
		}
	}
	_, err = st.Remove("github://acme/none")
	if !errors.Is(err, ErrNotInstalled) {
		t.Errorf("Remove(unknown) error = %v, want ErrNotInstalled", err)
	}
}

func TestRemoveAmbiguousPrefix(t *testing.T) {
	st, _ := openTestStore(t)
	plantEntry(t, st, "00000000"+strings.Repeat("1", 56), map[string]string{SpecFileName: "{}"})
	plantEntry(t, st, "00000000"+strings.Repeat("2", 56), map[string]string{SpecFileName: "{}"})
	_, err := st.Remove("sha256:00000000")
	if err == nil || !strings.Contains(err.Error(), "the prefix matches 2 packages") {
		t.Errorf("Remove(ambiguous) error = %v, want the ambiguity named", err)
	}
	if len(mustList(t, st)) != 2 {
		t.Errorf("an ambiguous Remove deleted something")
	}
}

package actions

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// writeAction writes an action.md for name at version running op under
// dir/actions/<name>/ and returns its path.
func writeAction(t *testing.T, dir, name, version string) string {
	t.Helper()
	p := filepath.Join(dir, "actions", name, FileName)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	body := "+++\nname = \"" + name + "\"\nversion = \"" + version + "\"\n\n[[execute]]\nconnector = \"github://acme/aileron-connector-google\"\nop = \"gmail.messages.send\"\n\n[[inputs]]\nname = \"to\"\nrequired = true\n+++\n\nSends mail.\n"
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func statuses(t *testing.T, s *Store, conns []Installed) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, e := range conns {
		m[e.Action.Name+"@"+e.Action.Version] = e.Status
	}
	return m
}

func TestStoreInstallSupersedeRemove(t *testing.T) {
	conns := testConnectors(t)
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pkg := t.TempDir()
	writeAction(t, pkg, "send", "1.0.0")
	writeAction(t, pkg, "notify", "0.1.0")
	got, _, err := s.Install(pkg, conns)
	if err != nil || len(got) != 2 {
		t.Fatalf("Install(package dir) = %v, %v; want 2 entries", got, err)
	}
	for _, e := range got {
		data, err := os.ReadFile(filepath.Join(e.Dir, FileName))
		if err != nil || !strings.Contains(string(data), e.Action.Name) {
			t.Errorf("entry %s: %v", e.Hash, err)
		}
		if info, _ := os.Stat(e.Dir); info.Mode().Perm() != 0o700 {
			t.Errorf("entry dir mode = %v, want 0700", info.Mode().Perm())
		}
	}
	// Idempotent: the same content installs to the same entry.
	again, _, err := s.Install(filepath.Join(pkg, "actions", "send", FileName), conns)
	if err != nil || len(again) != 1 || again[0].Hash != got[1].Hash && again[0].Hash != got[0].Hash {
		t.Fatalf("reinstall = %v, %v; want the existing entry", again, err)
	}
	// A newer version supersedes.
	newer := t.TempDir()
	if _, _, err := s.Install(writeAction(t, newer, "send", "1.1.0"), conns); err != nil {
		t.Fatal(err)
	}
	list, err := s.List(conns)
	if err != nil {
		t.Fatal(err)
	}
	st := statuses(t, s, list)
	if st["send@1.1.0"] != StatusOK || st["send@1.0.0"] != StatusSuperseded || st["notify@0.1.0"] != StatusOK {
		t.Errorf("statuses = %v, want send@1.1.0 ok, send@1.0.0 superseded, notify ok", st)
	}
	if a := Active(list)["send"]; a.Action.Version != "1.1.0" || a.Target.Tool != "google" {
		t.Errorf("Active[send] = %+v, want 1.1.0 on tool google", a)
	}
	// Without the connector, the action is listed as broken, not dropped.
	list, _ = s.List(nil)
	st = statuses(t, s, list)
	if !strings.HasPrefix(st["send@1.1.0"], StatusBrokenPrefix) || !strings.Contains(st["send@1.1.0"], "not installed") {
		t.Errorf("without connectors: send@1.1.0 is %q, want broken: ... not installed", st["send@1.1.0"])
	}
	if len(Active(list)) != 0 {
		t.Errorf("Active without connectors = %v, want none", Active(list))
	}
	// Remove takes the name and removes every version.
	removed, err := s.Remove("send")
	if err != nil || len(removed) != 2 {
		t.Fatalf("Remove(send) = %v, %v; want 2 entries", removed, err)
	}
	list, _ = s.List(conns)
	if len(list) != 1 || list[0].Action.Name != "notify" {
		t.Errorf("after remove: %v, want notify only", list)
	}
	if _, err := s.Remove("send"); !errors.Is(err, ErrNotInstalled) {
		t.Errorf("Remove(send) again = %v, want ErrNotInstalled", err)
	}
	tmp, _ := os.ReadDir(filepath.Join(s.Dir(), "tmp"))
	if len(tmp) != 0 {
		t.Errorf("tmp/ holds %d entries after the operations, want 0", len(tmp))
	}
}

func TestStoreInstallRefusesInvalid(t *testing.T) {
	s, _ := OpenStore(t.TempDir())
	pkg := t.TempDir()
	writeAction(t, pkg, "good", "1.0.0")
	bad := filepath.Join(pkg, "actions", "bad", FileName)
	os.MkdirAll(filepath.Dir(bad), 0o755)
	os.WriteFile(bad, []byte("+++\nname = \"bad\"\n+++\n"), 0o644)
	_, _, err := s.Install(pkg, testConnectors(t))
	var fe *FileError
	if !errors.As(err, &fe) || fe.Path != bad || !strings.Contains(err.Error(), bad+":1: exactly one [[execute]]") {
		t.Fatalf("Install = %v, want a FileError for %s line 1", err, bad)
	}
	if list, _ := s.List(nil); len(list) != 0 {
		t.Errorf("store holds %d entries after a refused install, want 0 (no partial install)", len(list))
	}
}

// TestStoreInstallRefusesFIFO: an action.md that is a FIFO is refused, not
// waited on (reading it used to block until something wrote to it).
func TestStoreInstallRefusesFIFO(t *testing.T) {
	s, _ := OpenStore(t.TempDir())
	fifo := filepath.Join(t.TempDir(), FileName)
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Install(fifo, testConnectors(t)); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("Install(FIFO) = %v, want a not-a-regular-file error", err)
	}
}

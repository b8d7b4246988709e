package policy

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Atomicity of the store: interrupted installs, and concurrent installs from
// goroutines and from separate processes.

// TestInterruptedInstall simulates a crash mid-install: the temporary
// directory never shows in List and the next install removes it.
func TestInterruptedInstall(t *testing.T) {
	st, _ := openTestStore(t)
	mustInstall(t, st, writeStoreSpec(t, storeSpec("github://acme/first", "", "first")), InstallOptions{})
	partial := filepath.Join(st.tmpDir(), "install-0123456789ab-42")
	if err := os.MkdirAll(filepath.Join(partial, "docs"), 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(partial, SpecFileName), []byte(`{"schema_version": "aileron.conn`), 0o600)
	if list := mustList(t, st); len(list) != 1 {
		t.Errorf("List() with a partial install = %d entries, want 1", len(list))
	}
	mustInstall(t, st, writeStoreSpec(t, storeSpec("github://acme/second", "", "second")), InstallOptions{})
	if got := tmpEntries(t, st); len(got) != 0 {
		t.Errorf("tmp/ after the next install = %v, want empty", got)
	}
	if list := mustList(t, st); len(list) != 2 {
		t.Errorf("List() = %d entries, want 2", len(list))
	}
}

func TestConcurrentInstalls(t *testing.T) {
	st, _ := openTestStore(t)
	same := writeStoreSpec(t, storeSpec("github://acme/same", "1.0.0", "same"))
	const n = 8
	var wg sync.WaitGroup
	hashes := make([]string, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			// Each goroutine opens its own Store, like separate commands.
			s, err := OpenStore(filepath.Dir(filepath.Dir(st.Dir())))
			if err != nil {
				errs[i] = err
				return
			}
			inst, err := s.Install(same, InstallOptions{})
			hashes[i], errs[i] = inst.Hash, err
		}()
	}
	close(start)
	wg.Wait()
	for i := range errs {
		if errs[i] != nil || hashes[i] != hashes[0] {
			t.Errorf("install %d = %s, %v; want %s, nil", i, hashes[i], errs[i], hashes[0])
		}
	}
	if list := mustList(t, st); len(list) != 1 {
		t.Errorf("List() = %d entries, want 1", len(list))
	}
	if got := tmpEntries(t, st); len(got) != 0 {
		t.Errorf("tmp/ = %v, want empty", got)
	}

	// Conflicting packages installed at once: the store lock makes exactly
	// one of them win; the others see it and are refused.
	var paths []string
	for i := 0; i < 4; i++ {
		paths = append(paths, writeStoreSpec(t, storeSpec(fmt.Sprintf("github://acme/race%d", i), "", "race")))
	}
	var ok, conflicts int
	var mu sync.Mutex
	start = make(chan struct{})
	for _, p := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := st.Install(p, InstallOptions{})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, ErrToolConflict):
				conflicts++
			default:
				t.Errorf("Install(%s) error: %v", p, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if ok != 1 || conflicts != 3 {
		t.Errorf("racing conflicting installs: %d succeeded, %d refused; want 1 and 3", ok, conflicts)
	}
}

// TestStoreHelperProcess is not a test: TestConcurrentInstallProcesses runs
// the test binary as a child process that installs one package.
func TestStoreHelperProcess(t *testing.T) {
	home, path := os.Getenv("AILERON_TEST_STORE_HOME"), os.Getenv("AILERON_TEST_STORE_PKG")
	if home == "" || path == "" {
		t.Skip("helper process for TestConcurrentInstallProcesses")
	}
	st, err := OpenStore(home)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	inst, err := st.Install(path, InstallOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(4)
	}
	fmt.Println(inst.Hash)
	os.Exit(0)
}

func TestConcurrentInstallProcesses(t *testing.T) {
	st, home := openTestStore(t)
	pkg := t.TempDir()
	os.WriteFile(filepath.Join(pkg, SpecFileName), []byte(storeSpec("github://acme/procs", "1.0.0", "procs")), 0o644)
	os.WriteFile(filepath.Join(pkg, "blob"), make([]byte, 1<<20), 0o644)
	const n = 4
	cmds := make([]*exec.Cmd, n)
	outs := make([]strings.Builder, n)
	for i := range cmds {
		c := exec.Command(os.Args[0], "-test.run=^TestStoreHelperProcess$", "-test.count=1")
		c.Env = append(os.Environ(), "AILERON_TEST_STORE_HOME="+home, "AILERON_TEST_STORE_PKG="+pkg)
		c.Stdout, c.Stderr = &outs[i], &outs[i]
		cmds[i] = c
	}
	for _, c := range cmds {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	want, _ := PackageHash(pkg)
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Errorf("process %d: %v\n%s", i, err, outs[i].String())
			continue
		}
		if !strings.Contains(outs[i].String(), want) {
			t.Errorf("process %d printed %q, want hash %s", i, outs[i].String(), want)
		}
	}
	list := mustList(t, st)
	if len(list) != 1 || list[0].Hash != want || list[0].Status != StatusOK {
		t.Errorf("List() = %v, want the one package", list)
	}
	if got := tmpEntries(t, st); len(got) != 0 {
		t.Errorf("tmp/ = %v, want empty", got)
	}
}

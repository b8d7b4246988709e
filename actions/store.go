package actions

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/aileron-dev/aileron-proxy/internal/atomicfile"
	"github.com/aileron-dev/aileron-proxy/internal/cappedfile"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// Installed entry statuses; broken and invalid entries carry a reason after
// the prefix.
const (
	StatusOK            = "ok"
	StatusSuperseded    = "superseded"
	StatusBrokenPrefix  = "broken: "
	StatusInvalidPrefix = "invalid: "
)

// ErrNotInstalled marks a Remove of a name no installed action has.
var ErrNotInstalled = errors.New("no installed action has that name")

// Store is the content-addressed store of action manifests under
// $AILERON_HOME/store/actions:
//
//	sha256/<hex>/action.md   one directory per manifest (hex of its bytes)
//	tmp/                     installs and removals in flight
//	.lock                    serializes writers (flock)
//
// Entries appear and disappear with one rename, so readers take no lock. A
// Store is safe for concurrent use, also by several processes.
type Store struct {
	root string
}

// Installed is one manifest in the store.
type Installed struct {
	// Hash is "sha256:<hex>" of the manifest's bytes.
	Hash string
	// Dir is the entry's directory.
	Dir string
	// Action is the parsed manifest; nil when the entry is invalid.
	Action *Action
	// Target is the operation the action runs; zero unless Status is ok.
	Target Target
	// Status is StatusOK (runnable), StatusSuperseded (a higher version of
	// the same name is installed), "broken: <reason>" (its connector or
	// operation is gone) or "invalid: <reason>".
	Status string
}

// IsActive reports whether the entry is the runnable version of its action.
func (i Installed) IsActive() bool { return i.Status == StatusOK }

// OpenStore returns the store under home ($AILERON_HOME); it creates nothing.
func OpenStore(home string) (*Store, error) {
	if home == "" {
		return nil, errors.New("opening the action store: home is empty; set AILERON_HOME or pass --home")
	}
	abs, err := filepath.Abs(home)
	if err != nil {
		return nil, fmt.Errorf("opening the action store in %q: %w", home, err)
	}
	return &Store{root: filepath.Join(abs, "store", "actions")}, nil
}

// Dir returns $AILERON_HOME/store/actions.
func (s *Store) Dir() string { return s.root }

func (s *Store) hashDir() string { return filepath.Join(s.root, "sha256") }
func (s *Store) tmpDir() string  { return filepath.Join(s.root, "tmp") }

// manifest is one action.md read for install.
type manifest struct {
	path string
	data []byte
}

// readManifests reads path: an action.md file, or a directory holding
// actions/*/action.md (a connector package) or action.md itself.
func readManifests(path string) ([]manifest, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	var paths []string
	if info.IsDir() {
		paths, err = filepath.Glob(filepath.Join(path, "actions", "*", FileName))
		if err != nil {
			return nil, err
		}
		if own := filepath.Join(path, FileName); len(paths) == 0 {
			if _, err := os.Stat(own); err == nil {
				paths = []string{own}
			}
		}
		if len(paths) == 0 {
			return nil, fmt.Errorf("%s holds no actions/*/%s (nor %s); point at an action.md or a connector package with actions", path, FileName, FileName)
		}
		sort.Strings(paths)
	} else {
		paths = []string{path}
	}
	out := make([]manifest, 0, len(paths))
	for _, p := range paths {
		data, err := cappedfile.Read(p, MaxFileSize)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", p, err)
		}
		out = append(out, manifest{path: p, data: data})
	}
	return out, nil
}

// FileError is a manifest that failed validation, with its path.
type FileError struct {
	Path string
	Err  *ValidationError
}

// Error returns the path and every problem, one per line, each as
// "<path>:<line>: <message>" ("<path>:<line>: warning: <message>" for a
// warning).
func (e *FileError) Error() string {
	lines := make([]string, len(e.Err.Problems))
	for i, p := range e.Err.Problems {
		lines[i] = fmt.Sprintf("%s:%d: %s", e.Path, p.Line, p.text())
	}
	return strings.Join(lines, "\n")
}

// Errors returns how many of the problems are errors (not warnings).
func (e *FileError) Errors() int {
	n := 0
	for _, p := range e.Err.Problems {
		if !p.IsWarning() {
			n++
		}
	}
	return n
}

// Warning is a warning about a manifest that was accepted.
type Warning struct {
	Path string
	Problem
}

// String returns "<path>:<line>: warning: <message>".
func (w Warning) String() string { return fmt.Sprintf("%s:%d: %s", w.Path, w.Line, w.text()) }

// Unwrap returns the *ValidationError.
func (e *FileError) Unwrap() error { return e.Err }

// Validate parses every manifest at path (as Install reads it) and checks
// it against conns, the active connectors, reporting every problem of a
// manifest in one pass (see Inspect). It returns the parsed actions and
// their warnings, or an error joining one *FileError per invalid manifest
// (its warnings included).
func Validate(path string, conns []policy.Connector) ([]*Action, []Warning, error) {
	ms, err := readManifests(path)
	if err != nil {
		return nil, nil, err
	}
	return validateManifests(ms, conns)
}

// validateManifests parses and checks manifests already read, as Validate
// describes.
func validateManifests(ms []manifest, conns []policy.Connector) ([]*Action, []Warning, error) {
	var errs []error
	var out []*Action
	var warnings []Warning
	for _, m := range ms {
		a, _, problems := Inspect(m.data, conns)
		if HasErrors(problems) {
			errs = append(errs, &FileError{Path: m.path, Err: &ValidationError{Problems: problems}})
			continue
		}
		for _, p := range problems {
			warnings = append(warnings, Warning{Path: m.path, Problem: p})
		}
		out = append(out, a)
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	return out, warnings, nil
}

// Install validates every manifest at path against conns and adds them to
// the store; when any is invalid nothing is installed. Installing a
// manifest already present changes nothing. Each manifest is written to
// tmp/, synced and renamed to sha256/<hex> under the store's lock. The
// warnings of the manifests are returned with the entries.
func (s *Store) Install(path string, conns []policy.Connector) ([]Installed, []Warning, error) {
	// Read once: the bytes validated are the bytes installed.
	ms, err := readManifests(path)
	if err != nil {
		return nil, nil, err
	}
	_, warnings, err := validateManifests(ms, conns)
	if err != nil {
		return nil, nil, err
	}
	installed, err := s.install(ms, conns)
	if err != nil {
		return nil, nil, err
	}
	return installed, warnings, nil
}

// install writes valid manifests into the store, as Install describes.
func (s *Store) install(ms []manifest, conns []policy.Connector) ([]Installed, error) {
	for _, d := range []string{s.hashDir(), s.tmpDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("creating the action store: %w", err)
		}
	}
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	s.cleanTemp()
	var hashes []string
	for _, m := range ms {
		sum := sha256.Sum256(m.data)
		hexHash := hex.EncodeToString(sum[:])
		hashes = append(hashes, "sha256:"+hexHash)
		final := filepath.Join(s.hashDir(), hexHash)
		if data, err := os.ReadFile(filepath.Join(final, FileName)); err == nil && string(data) == string(m.data) {
			continue // already installed
		}
		if err := s.discard(final); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("replacing the damaged entry sha256:%s: %w", hexHash, err)
		}
		if err := s.write(final, m.data); err != nil {
			return nil, fmt.Errorf("installing %s: %w", m.path, err)
		}
	}
	all, err := s.List(conns)
	if err != nil {
		return nil, err
	}
	var out []Installed
	for _, h := range hashes {
		for _, e := range all {
			if e.Hash == h {
				out = append(out, e)
			}
		}
	}
	return out, nil
}

// write puts data at final/action.md through a synced temporary directory
// and one rename.
func (s *Store) write(final string, data []byte) error {
	tmp, err := os.MkdirTemp(s.tmpDir(), "install-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp) // no-op after the rename
	f, err := os.OpenFile(filepath.Join(tmp, FileName), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return err
	}
	if err := atomicfile.SyncDir(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	return atomicfile.SyncDir(s.hashDir())
}

// Remove deletes every installed version of the action named name.
func (s *Store) Remove(name string) ([]Installed, error) {
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	all, err := s.List(nil)
	if err != nil {
		return nil, err
	}
	var removed []Installed
	var names []string
	for _, e := range all {
		if e.Action == nil {
			continue
		}
		names = append(names, e.Action.Name)
		if e.Action.Name != name {
			continue
		}
		if err := s.discard(e.Dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return removed, fmt.Errorf("removing action %q (%s): %w", name, e.Hash, err)
		}
		removed = append(removed, e)
	}
	if len(removed) == 0 {
		return nil, fmt.Errorf("removing action %q: %w; installed actions: %s (see \"aileron-proxy action list\")", name, ErrNotInstalled, listOrNone(names))
	}
	return removed, nil
}

// lock takes the store's exclusive writer lock; the returned func releases
// it.
func (s *Store) lock() (func(), error) {
	if err := os.MkdirAll(s.root, 0o700); err != nil {
		return nil, fmt.Errorf("creating the action store: %w", err)
	}
	return policy.LockDir(s.root, "action store")
}

func (s *Store) cleanTemp() {
	ents, _ := os.ReadDir(s.tmpDir())
	for _, e := range ents {
		_ = os.RemoveAll(filepath.Join(s.tmpDir(), e.Name()))
	}
}

// discard moves an entry out of sha256/ with one rename and deletes it.
func (s *Store) discard(dir string) error {
	return policy.DiscardDir(dir, s.hashDir(), s.tmpDir(), "remove-")
}

// List returns every entry with its status, checked against conns (the
// active connectors), sorted by name, version (highest first) and hash;
// invalid entries come last. An action whose connector or operation is no
// longer installed is listed as broken, not dropped.
func (s *Store) List(conns []policy.Connector) ([]Installed, error) {
	ents, err := os.ReadDir(s.hashDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the action store: %w", err)
	}
	var out []Installed
	for _, de := range ents {
		name := de.Name()
		if len(name) != 64 || strings.Trim(name, "0123456789abcdef") != "" {
			continue
		}
		e := Installed{Hash: "sha256:" + name, Dir: filepath.Join(s.hashDir(), name)}
		p := filepath.Join(e.Dir, FileName)
		data, err := cappedfile.Read(p, MaxFileSize)
		if err != nil {
			err = fmt.Errorf("reading %s: %w", p, err)
		}
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // removed meanwhile
		case err != nil:
			e.Status = StatusInvalidPrefix + err.Error()
		case fmt.Sprintf("%x", sha256.Sum256(data)) != name:
			e.Status = StatusInvalidPrefix + "content does not match its hash (the store was changed by hand); reinstall the action"
		default:
			if a, err := Parse(data); err != nil {
				e.Status = StatusInvalidPrefix + strings.ReplaceAll(err.Error(), "\n", "; ")
			} else {
				e.Action = a
			}
		}
		out = append(out, e)
	}
	resolve(out, conns)
	return out, nil
}

// Active returns the runnable actions of entries, keyed by name.
func Active(entries []Installed) map[string]Installed {
	m := map[string]Installed{}
	for _, e := range entries {
		if e.IsActive() {
			m[e.Action.Name] = e
		}
	}
	return m
}

// resolve sets statuses: per name the highest version is current (ties to
// the smaller hash), the rest superseded; a current action that does not
// check against conns is broken.
func resolve(entries []Installed, conns []policy.Connector) {
	sort.SliceStable(entries, func(i, j int) bool {
		a, b := entries[i], entries[j]
		if (a.Action == nil) != (b.Action == nil) {
			return a.Action != nil
		}
		if a.Action == nil {
			return a.Hash < b.Hash
		}
		if a.Action.Name != b.Action.Name {
			return a.Action.Name < b.Action.Name
		}
		if c := policy.CompareVersions(a.Action.Version, b.Action.Version); c != 0 {
			return c > 0
		}
		return a.Hash < b.Hash
	})
	seen := map[string]bool{}
	for i := range entries {
		e := &entries[i]
		if e.Action == nil {
			continue
		}
		if seen[e.Action.Name] {
			e.Status = StatusSuperseded
			continue
		}
		seen[e.Action.Name] = true
		t, problems := e.Action.Check(conns)
		if i := slices.IndexFunc(problems, func(p Problem) bool { return !p.IsWarning() }); i >= 0 {
			e.Status = StatusBrokenPrefix + problems[i].Message
			continue
		}
		e.Target, e.Status = t, StatusOK
	}
}

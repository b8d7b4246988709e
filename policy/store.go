package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/aileron-dev/aileron-proxy/internal/atomicfile"
)

// Installed entry statuses. Invalid and conflicting entries carry a reason
// after the prefix: "invalid: <reason>", "conflict: <reason>".
const (
	StatusOK             = "ok"
	StatusSuperseded     = "superseded"
	StatusInvalidPrefix  = "invalid: "
	StatusConflictPrefix = "conflict: "
)

// ErrToolConflict marks an Install refused because a tool command is already
// provided by another installed connector.
var ErrToolConflict = errors.New("tool command conflict")

// ErrNotInstalled marks a Remove reference that matches nothing.
var ErrNotInstalled = errors.New("no installed connector matches")

// Store is the content-addressed store of connector packages under
// $AILERON_HOME/store/connectors:
//
//	sha256/<hex>/aileron.connector.v1.json   one directory per package
//	tmp/                                     installs and removals in flight
//	.lock                                    serializes writers (flock)
//
// Directories are 0700 and files 0600. Readers (List, Load) take no lock:
// entries appear and disappear with a single rename, so a reader sees a
// package whole or not at all. A Store is safe for concurrent use, also by
// several processes.
type Store struct {
	root string
}

// InstallOptions tunes Install.
type InstallOptions struct {
	// Force installs even when a tool command collides with another installed
	// connector; both are then in conflict and neither is active until one
	// is removed.
	Force bool
}

// Installed is one package in the store.
type Installed struct {
	// Hash is "sha256:<hex>", the PackageHash of the package and its
	// directory name.
	Hash string
	// Dir is the package directory.
	Dir string
	// Spec is the parsed spec; nil when the entry is invalid.
	Spec *Spec
	// Status is StatusOK (active), StatusSuperseded (a higher version of the
	// same FQN is active), "invalid: <reason>" or "conflict: <reason>".
	Status string
}

// IsActive reports whether the entry is loaded into the policy.
func (i Installed) IsActive() bool { return i.Status == StatusOK }

// LoadResult is the installed set as the daemon loads it.
type LoadResult struct {
	// Active are the connectors to compile, sorted by FQN.
	Active []Connector
	// All are every entry, as List returns them.
	All []Installed
	// Problems explain each skipped entry, one line each, for the log.
	Problems []string
}

// OpenStore returns the store under home ($AILERON_HOME). It creates
// nothing; Install creates the directories it needs.
func OpenStore(home string) (*Store, error) {
	if home == "" {
		return nil, errors.New("opening the connector store: home is empty; set AILERON_HOME or pass --home")
	}
	abs, err := filepath.Abs(home)
	if err != nil {
		return nil, fmt.Errorf("opening the connector store in %q: %w", home, err)
	}
	return &Store{root: filepath.Join(abs, "store", "connectors")}, nil
}

// Dir returns the store directory, $AILERON_HOME/store/connectors.
func (s *Store) Dir() string { return s.root }

func (s *Store) hashDir() string { return filepath.Join(s.root, "sha256") }
func (s *Store) tmpDir() string  { return filepath.Join(s.root, "tmp") }

// Install validates the package at path (a spec file or a package
// directory) and adds it to the store. An invalid spec installs nothing and
// the error wraps the *ValidationError or *SyntaxError. Installing a package
// that is already present succeeds without change. Install refuses, with
// ErrToolConflict, a package whose tool commands another installed connector
// (a different FQN) already provides, unless opts.Force is set.
//
// The package is copied into a temporary directory under the store, synced,
// and renamed to sha256/<hex>, under an exclusive lock on the store; any
// temporary directory left by an interrupted install is removed first.
func (s *Store) Install(path string, opts InstallOptions) (Installed, error) {
	files, err := readPackage(path)
	if err != nil {
		return Installed{}, fmt.Errorf("reading package %s: %w", path, err)
	}
	spec, _, err := ParseSpec(specData(files))
	if err != nil {
		return Installed{}, fmt.Errorf("validating %s: %w", path, err)
	}
	hash := hashFiles(files)
	hexHash := strings.TrimPrefix(hash, "sha256:")
	if err := os.MkdirAll(s.hashDir(), 0o700); err != nil {
		return Installed{}, fmt.Errorf("creating the store directory: %w", err)
	}
	if err := os.MkdirAll(s.tmpDir(), 0o700); err != nil {
		return Installed{}, fmt.Errorf("creating the store directory: %w", err)
	}
	unlock, err := s.lock()
	if err != nil {
		return Installed{}, err
	}
	defer unlock()
	s.cleanTemp()

	final := filepath.Join(s.hashDir(), hexHash)
	entries, _, err := s.scan()
	if err != nil {
		return Installed{}, err
	}
	for _, e := range entries {
		if e.Hash != hash {
			continue
		}
		if e.Spec != nil {
			return e, nil // already installed: idempotent
		}
		// A damaged entry with this hash: replace it.
		if err := s.discard(final, hexHash); err != nil {
			return Installed{}, fmt.Errorf("replacing the damaged entry %s: %w", hash, err)
		}
	}
	if !opts.Force {
		if err := toolConflicts(spec, hash, entries); err != nil {
			return Installed{}, err
		}
	}
	tmp, err := os.MkdirTemp(s.tmpDir(), "install-"+hexHash[:12]+"-")
	if err != nil {
		return Installed{}, fmt.Errorf("installing %s: %w", spec.Connector.FQN, err)
	}
	defer os.RemoveAll(tmp) // no-op after the rename
	if err := writePackage(tmp, files); err != nil {
		return Installed{}, fmt.Errorf("installing %s: %w", spec.Connector.FQN, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return Installed{}, fmt.Errorf("installing %s: %w", spec.Connector.FQN, err)
	}
	if err := atomicfile.SyncDir(s.hashDir()); err != nil {
		return Installed{}, fmt.Errorf("installing %s: %w", spec.Connector.FQN, err)
	}
	entries, _, err = s.scan()
	if err != nil {
		return Installed{}, err
	}
	for _, e := range entries {
		if e.Hash == hash {
			return e, nil
		}
	}
	return Installed{}, fmt.Errorf("installing %s: %s vanished from the store right after install", spec.Connector.FQN, hash)
}

// toolConflicts reports the tool commands of spec that the current version
// of another installed FQN already provides.
func toolConflicts(spec *Spec, hash string, entries []Installed) error {
	mine := map[string]string{}
	for _, t := range spec.Tools {
		mine[ToolCommand(t.Name)] = t.Name
	}
	var msgs []string
	for _, e := range currentVersions(entries) {
		if e.Spec.Connector.FQN == spec.Connector.FQN {
			continue
		}
		for _, t := range e.Spec.Tools {
			cmd := ToolCommand(t.Name)
			if _, clash := mine[cmd]; clash {
				msgs = append(msgs, fmt.Sprintf("tool command %q is already provided by %s (%s); remove that connector first with \"aileron-proxy connector remove %s\", or install with --force (then neither is active until one is removed)",
					cmd, describe(e), shortHash(e.Hash), e.Spec.Connector.FQN))
			}
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	sort.Strings(msgs)
	return fmt.Errorf("installing %s (%s): %w: %s", spec.Connector.FQN, shortHash(hash), ErrToolConflict, strings.Join(msgs, "; "))
}

// lock takes the store's exclusive writer lock (flock on .lock); the
// returned func releases it. The kernel drops it if the process dies.
func (s *Store) lock() (func(), error) { return LockDir(s.root, "connector store") }

// cleanTemp removes what interrupted installs and removals left in tmp/.
// It runs under the writer lock, so nothing in tmp/ is in use.
func (s *Store) cleanTemp() {
	ents, err := os.ReadDir(s.tmpDir())
	if err != nil {
		return
	}
	for _, e := range ents {
		_ = os.RemoveAll(filepath.Join(s.tmpDir(), e.Name()))
	}
}

// discard moves an entry out of sha256/ with one rename (so readers never
// see it half deleted) and deletes it.
func (s *Store) discard(dir, hexHash string) error {
	return DiscardDir(dir, s.hashDir(), s.tmpDir(), "remove-"+hexHash[:12]+"-")
}

// Remove deletes installed packages and returns them. ref is an FQN (every
// installed version), an FQN with "@<version>" (that version), or
// "sha256:<hex>" (that package; a unique prefix of at least 8 hex digits
// will do). A ref that matches nothing fails with ErrNotInstalled.
func (s *Store) Remove(ref string) ([]Installed, error) {
	entries, _, err := s.scan()
	if err != nil {
		return nil, err
	}
	if _, err := matchRef(ref, entries); err != nil {
		return nil, err
	}
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if entries, _, err = s.scan(); err != nil {
		return nil, err
	}
	matches, err := matchRef(ref, entries)
	if err != nil {
		return nil, err
	}
	var removed []Installed
	for _, e := range matches {
		hexHash := strings.TrimPrefix(e.Hash, "sha256:")
		if err := s.discard(e.Dir, hexHash); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed meanwhile
			}
			return removed, fmt.Errorf("removing %s: %w", e.Hash, err)
		}
		removed = append(removed, e)
	}
	return removed, nil
}

// matchRef resolves a Remove reference against the entries.
func matchRef(ref string, entries []Installed) ([]Installed, error) {
	const hint = "run \"aileron-proxy connector list\" to see what is installed"
	var out []Installed
	if h, ok := strings.CutPrefix(ref, "sha256:"); ok {
		h = strings.ToLower(h)
		if len(h) < 8 || len(h) > 64 || strings.Trim(h, "0123456789abcdef") != "" {
			return nil, fmt.Errorf("removing %q: a hash reference is sha256: followed by 8 to 64 hex digits; %s", ref, hint)
		}
		for _, e := range entries {
			if strings.HasPrefix(strings.TrimPrefix(e.Hash, "sha256:"), h) {
				out = append(out, e)
			}
		}
		if len(out) > 1 {
			var hs []string
			for _, e := range out {
				hs = append(hs, e.Hash)
			}
			return nil, fmt.Errorf("removing %q: the prefix matches %d packages (%s); give more hex digits", ref, len(out), strings.Join(hs, ", "))
		}
	} else {
		name, version, hasVersion := cutVersion(ref)
		f, err := ParseFQN(name)
		if err != nil {
			return nil, fmt.Errorf("removing %q: it is neither a connector FQN nor sha256:<hex>: %w", ref, err)
		}
		for _, e := range entries {
			if e.Spec != nil && e.Spec.Connector.FQN == f.String() && (!hasVersion || e.Spec.Connector.Version == version) {
				out = append(out, e)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("removing %q: %w; %s", ref, ErrNotInstalled, hint)
	}
	return out, nil
}

// cutVersion splits "fqn@version" after the scheme.
func cutVersion(ref string) (name, version string, ok bool) {
	scheme, rest, found := strings.Cut(ref, "://")
	if !found {
		return ref, "", false
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		return scheme + "://" + rest[:at], rest[at+1:], true
	}
	return ref, "", false
}

// List returns every entry in the store, valid or not, each with its status,
// sorted by FQN, then version (highest first) and hash; invalid entries come
// last, by hash. An unreadable entry never hides the others.
func (s *Store) List() ([]Installed, error) {
	entries, _, err := s.scan()
	return entries, err
}

// Load returns the installed set: the active connectors (status ok), every
// entry, and one line per skipped entry explaining why. Invalid entries,
// superseded versions and conflicting connectors are skipped; the others
// load regardless. A store that does not exist yet is empty.
func (s *Store) Load() (*LoadResult, error) {
	entries, problems, err := s.scan()
	if err != nil {
		return nil, err
	}
	res := &LoadResult{All: entries, Problems: problems}
	for _, e := range entries {
		switch {
		case e.Status == StatusOK:
			res.Active = append(res.Active, Connector{Spec: e.Spec, Hash: e.Hash})
		case e.Spec == nil:
			res.Problems = append(res.Problems, fmt.Sprintf("skipping connector %s (%s): %s", e.Hash, e.Dir, e.Status))
		case strings.HasPrefix(e.Status, StatusConflictPrefix):
			res.Problems = append(res.Problems, fmt.Sprintf("skipping connector %s (%s): %s", e.Spec.Connector.FQN, e.Hash, e.Status))
		}
	}
	sort.Slice(res.Active, func(i, j int) bool {
		return res.Active[i].Spec.Connector.FQN < res.Active[j].Spec.Connector.FQN
	})
	return res, nil
}

// scan reads every entry of sha256/ and resolves statuses. Names that are
// not a sha256 hex digest are not entries; they are returned as problems.
func (s *Store) scan() ([]Installed, []string, error) {
	ents, err := os.ReadDir(s.hashDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading the connector store: %w", err)
	}
	var entries []Installed
	var problems []string
	for _, de := range ents {
		name := de.Name()
		dir := filepath.Join(s.hashDir(), name)
		if len(name) != 64 || strings.Trim(name, "0123456789abcdef") != "" {
			problems = append(problems, fmt.Sprintf("ignoring %s: not a package directory (those are named by their sha256); remove it", dir))
			continue
		}
		e, ok := readEntry(dir, "sha256:"+name)
		if ok {
			entries = append(entries, e)
		}
	}
	resolve(entries)
	return entries, problems, nil
}

// readEntry reads and verifies one package directory. ok is false when it
// disappeared meanwhile (a concurrent remove).
func readEntry(dir, hash string) (Installed, bool) {
	e := Installed{Hash: hash, Dir: dir}
	invalid := func(format string, args ...any) (Installed, bool) {
		e.Status = StatusInvalidPrefix + fmt.Sprintf(format, args...)
		return e, true
	}
	info, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return e, false
	}
	if err != nil || !info.IsDir() {
		return invalid("not a package directory; remove it with \"aileron-proxy connector remove %s\"", hash)
	}
	files, err := readPackage(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Lstat(dir); errors.Is(serr, fs.ErrNotExist) {
			return e, false
		}
	}
	if err != nil {
		return invalid("unreadable: %s; reinstall the package or remove it with \"aileron-proxy connector remove %s\"", err, hash)
	}
	if got := hashFiles(files); got != hash {
		return invalid("content does not match its hash (it is %s; the store was changed by hand); reinstall the package or remove it with \"aileron-proxy connector remove %s\"", shortHash(got), hash)
	}
	spec, _, err := ParseSpec(specData(files))
	if err != nil {
		reason := err.Error()
		var ve *ValidationError
		if errors.As(err, &ve) && len(ve.Problems) > 0 {
			reason = ve.Problems[0].String()
			if n := len(ve.Problems) - 1; n > 0 {
				reason += fmt.Sprintf(" (and %d more)", n)
			}
		}
		return invalid("%s; see all problems with \"aileron-proxy connector validate %s\"", reason, filepath.Join(dir, SpecFileName))
	}
	e.Spec = spec
	return e, true
}

// currentVersions returns, per FQN, the valid entry that would be active
// without conflicts: the highest version (unversioned lowest), ties broken
// by the smaller hash.
func currentVersions(entries []Installed) []Installed {
	best := map[string]Installed{}
	var order []string
	for _, e := range entries {
		if e.Spec == nil {
			continue
		}
		fqn := e.Spec.Connector.FQN
		cur, seen := best[fqn]
		if !seen {
			order = append(order, fqn)
		}
		if !seen || newer(e, cur) {
			best[fqn] = e
		}
	}
	sort.Strings(order)
	out := make([]Installed, len(order))
	for i, f := range order {
		out[i] = best[f]
	}
	return out
}

// newer reports whether a takes precedence over b (same FQN).
func newer(a, b Installed) bool {
	if c := compareVersions(a.Spec.Connector.Version, b.Spec.Connector.Version); c != 0 {
		return c > 0
	}
	return a.Hash < b.Hash
}

// resolve sets the status of every valid entry and sorts entries: one
// current version per FQN, the rest superseded; current versions whose tool
// commands collide with another FQN's are all in conflict (fail closed).
func resolve(entries []Installed) {
	current := currentVersions(entries)
	byCmd := map[string][]Installed{}
	for _, e := range current {
		seen := map[string]bool{}
		for _, t := range e.Spec.Tools {
			cmd := ToolCommand(t.Name)
			if !seen[cmd] {
				seen[cmd] = true
				byCmd[cmd] = append(byCmd[cmd], e)
			}
		}
	}
	status := map[string]string{}
	cmds := make([]string, 0, len(byCmd))
	for cmd := range byCmd {
		cmds = append(cmds, cmd)
	}
	sort.Strings(cmds)
	for _, e := range current {
		var reasons []string
		for _, cmd := range cmds {
			users := byCmd[cmd]
			if len(users) < 2 || !slices.ContainsFunc(users, func(u Installed) bool { return u.Hash == e.Hash }) {
				continue
			}
			var others, names []string
			for _, o := range users {
				names = append(names, fmt.Sprintf("%s (%s)", describe(o), shortHash(o.Hash)))
				if o.Hash != e.Hash {
					others = append(others, o.Spec.Connector.FQN)
				}
			}
			reasons = append(reasons, fmt.Sprintf("tool command %q is provided by %s; neither is active until one is removed with \"aileron-proxy connector remove %s\" (or %s)",
				cmd, strings.Join(names, " and "), others[0], e.Spec.Connector.FQN))
		}
		if len(reasons) > 0 {
			status[e.Hash] = StatusConflictPrefix + strings.Join(reasons, "; ")
		} else {
			status[e.Hash] = StatusOK
		}
	}
	for i := range entries {
		if entries[i].Spec == nil {
			continue
		}
		if st, ok := status[entries[i].Hash]; ok {
			entries[i].Status = st
		} else {
			entries[i].Status = StatusSuperseded
		}
	}
	sort.SliceStable(entries, func(i, j int) bool {
		a, b := entries[i], entries[j]
		if (a.Spec == nil) != (b.Spec == nil) {
			return a.Spec != nil
		}
		if a.Spec == nil {
			return a.Hash < b.Hash
		}
		if a.Spec.Connector.FQN != b.Spec.Connector.FQN {
			return a.Spec.Connector.FQN < b.Spec.Connector.FQN
		}
		return newer(a, b)
	})
}

// describe names an entry as "<fqn> <version>" or "<fqn>" when unversioned.
func describe(e Installed) string {
	if e.Spec.Connector.Version == "" {
		return e.Spec.Connector.FQN
	}
	return e.Spec.Connector.FQN + " " + e.Spec.Connector.Version
}

// shortHash returns "sha256:" and the first 12 hex digits, which Remove
// accepts as a reference.
func shortHash(hash string) string {
	if len(hash) > len("sha256:")+12 {
		return hash[:len("sha256:")+12]
	}
	return hash
}

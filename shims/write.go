package shims

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/aileron-dev/aileron-proxy/internal/atomicfile"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// File names inside a rendered directory.
const (
	ToolsFile = "tools.txt"
	BinDir    = "bin"
)

// WriteDir writes r into dir as dir/tools.txt (0644) and dir/bin/<command>
// (0755), replacing a previous render. Everything is written into a fresh
// temporary directory next to dir first and then renamed into place, so a
// failure leaves dir as it was and leaves no temporary files. dir's parent is
// created when missing. An existing dir that holds anything but tools.txt
// and a bin directory of regular files is refused rather than replaced, so a
// wrong --out never deletes unrelated files. dir is 0755: the sandbox user
// reads it through a bind mount.
func WriteDir(dir string, r *Rendered) error {
	if r == nil {
		return errors.New("writing tools: nothing rendered; call Render first")
	}
	if dir == "" {
		return errors.New("writing tools: no output directory; pass --out DIR")
	}
	seen := map[string]bool{}
	for _, s := range r.Shims {
		if !policy.IsSafeCommandName(s.Command) || seen[s.Command] {
			return fmt.Errorf("writing tools: shim command %q is not a unique safe file name; render again", s.Command)
		}
		seen[s.Command] = true
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("resolving the output directory %q: %w", dir, err)
	}
	if err := checkReplaceable(abs); err != nil {
		return err
	}
	parent := filepath.Dir(abs)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("creating the parent of %q: %w", abs, err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(abs)+".tmp-")
	if err != nil {
		return fmt.Errorf("creating a temporary directory next to %q: %w", abs, err)
	}
	done := false
	defer func() {
		if !done {
			_ = os.RemoveAll(tmp)
		}
	}()
	if err := fill(tmp, r); err != nil {
		return err
	}
	if err := swap(tmp, abs); err != nil {
		return err
	}
	done = true
	_ = atomicfile.SyncDir(parent)
	return nil
}

// checkReplaceable refuses to replace a directory that is not a previous
// render.
func checkReplaceable(dir string) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking the output directory %q: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("writing tools to %q: it exists and is not a directory; choose another --out", dir)
	}
	foreign := func(name string) error {
		return fmt.Errorf("writing tools to %q: refusing to replace it because it holds %q, which a render does not write; choose an empty or new --out directory", dir, name)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("reading the output directory %q: %w", dir, err)
	}
	for _, e := range entries {
		switch {
		case e.Name() == ToolsFile && e.Type().IsRegular():
		case e.Name() == BinDir && e.IsDir():
			bins, err := os.ReadDir(filepath.Join(dir, BinDir))
			if err != nil {
				return fmt.Errorf("reading %q: %w", filepath.Join(dir, BinDir), err)
			}
			for _, b := range bins {
				if !b.Type().IsRegular() {
					return foreign(filepath.Join(BinDir, b.Name()))
				}
			}
		default:
			return foreign(e.Name())
		}
	}
	return nil
}

// fill writes the rendered files into the empty directory tmp.
func fill(tmp string, r *Rendered) error {
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("setting the mode of %q: %w", tmp, err)
	}
	if err := writeFile(filepath.Join(tmp, ToolsFile), r.ToolsTxt, 0o644); err != nil {
		return err
	}
	bin := filepath.Join(tmp, BinDir)
	if err := os.Mkdir(bin, 0o755); err != nil {
		return fmt.Errorf("creating %q: %w", bin, err)
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		return fmt.Errorf("setting the mode of %q: %w", bin, err)
	}
	for _, s := range r.Shims {
		if err := writeFile(filepath.Join(bin, s.Command), s.Script, 0o755); err != nil {
			return err
		}
	}
	_ = atomicfile.SyncDir(bin)
	_ = atomicfile.SyncDir(tmp)
	return nil
}

func writeFile(name string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("creating %q: %w", name, err)
	}
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Chmod(mode) // the umask must not narrow the mode
	}
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("writing %q: %w", name, werr)
	}
	return nil
}

// swap moves tmp to dir. When dir exists it is first moved aside and put
// back if the second rename fails; the old render is removed afterwards.
func swap(tmp, dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.Rename(tmp, dir); err != nil {
			return fmt.Errorf("moving the rendered tools into %q: %w", dir, err)
		}
		return nil
	}
	old := tmp + ".old"
	if err := os.Rename(dir, old); err != nil {
		return fmt.Errorf("moving the previous render %q aside: %w", dir, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if rerr := os.Rename(old, dir); rerr != nil {
			return fmt.Errorf("moving the rendered tools into %q: %w (and restoring the previous render from %q failed: %w)", dir, err, old, rerr)
		}
		return fmt.Errorf("moving the rendered tools into %q: %w", dir, err)
	}
	if err := os.RemoveAll(old); err != nil {
		return fmt.Errorf("removing the previous render %q: %w (the new one is in place; delete it by hand)", old, err)
	}
	return nil
}

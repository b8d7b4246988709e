package daemon

import (
	"context"
	"crypto/sha256"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"time"
)

// fingerprint summarises the state of the files under roots (path, size,
// mode and modification time of each), so a change anywhere changes it.
// Missing roots are part of the state, not errors. A store's package
// directory (sha256/<64 hex>) is summarised by its own entry and not
// entered: packages are immutable and appear, grow and disappear by
// renames and file creation, which change that entry's time; so a walk of
// a store of 1,000 connectors opens one directory, not a thousand.
func fingerprint(roots ...string) [sha256.Size]byte {
	var lines []string
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				lines = append(lines, p+" !")
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return nil
			}
			lines = append(lines, p+" "+strconv.FormatInt(info.Size(), 10)+" "+info.Mode().String()+" "+strconv.FormatInt(info.ModTime().UnixNano(), 10))
			if d.IsDir() && isPackageDir(p) {
				return fs.SkipDir
			}
			return nil
		})
	}
	sort.Strings(lines)
	h := sha256.New()
	for _, l := range lines {
		h.Write([]byte(l))
		h.Write([]byte{'\n'})
	}
	var sum [sha256.Size]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// isPackageDir reports whether p is a content-addressed package directory,
// .../sha256/<64 lower-case hex>.
func isPackageDir(p string) bool {
	name := filepath.Base(p)
	if len(name) != 2*sha256.Size || filepath.Base(filepath.Dir(p)) != "sha256" {
		return false
	}
	for _, c := range name {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// watch calls reload whenever the fingerprint of roots differs from last
// (the state the caller last loaded), checking every interval until ctx
// ends. Polling keeps it portable and dependency free; the store changes
// rarely and a stat walk of it is cheap.
func watch(ctx context.Context, interval time.Duration, last [sha256.Size]byte, reload func(), roots ...string) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			now := fingerprint(roots...)
			if now != last {
				last = now
				reload()
			}
		}
	}
}

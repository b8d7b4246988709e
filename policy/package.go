package policy

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/aileron-dev/aileron-proxy/internal/atomicfile"
	"github.com/aileron-dev/aileron-proxy/internal/cappedfile"
)

// A connector package is a directory holding aileron.connector.v1.json at
// its root and any other regular files (docs, icons); a lone spec file is a
// package of one file. This file reads, hashes and writes packages.

// Size limits of a connector package; Install refuses packages beyond them.
const (
	// MaxSpecSize caps aileron.connector.v1.json. It holds a whole large
	// API imported from its description (Kubernetes' 1,123 operations make
	// 2.2 MB) while bounding what a reload parses.
	MaxSpecSize = 4 << 20
	// MaxPackageFileSize caps every other file of a package.
	MaxPackageFileSize = 8 << 20
	// MaxPackageSize caps the sum of a package's file sizes.
	MaxPackageSize = 32 << 20
	// MaxPackageFiles caps the number of files in a package.
	MaxPackageFiles = 1000
)

// pkgFile is one file of a package; rel uses '/' separators.
type pkgFile struct {
	rel  string
	data []byte
}

// PackageHash returns "sha256:<hex>" for the package at path: a spec file
// (a package with one file named aileron.connector.v1.json) or a package
// directory. The hash is SHA-256 over the package's regular files in
// ascending byte order of their slash-separated relative paths, each encoded
// as
//
//	uint64 big-endian len(path) || path || uint64 big-endian len(content) || content
//
// so the same content always gives the same hash, whatever the file order,
// timestamps or modes. docs/store.md shows how to compute it by hand.
func PackageHash(path string) (string, error) {
	files, err := readPackage(path)
	if err != nil {
		return "", fmt.Errorf("hashing package %s: %w", path, err)
	}
	return hashFiles(files), nil
}

func hashFiles(files []pkgFile) string {
	h := sha256.New()
	var n [8]byte
	for _, f := range files {
		binary.BigEndian.PutUint64(n[:], uint64(len(f.rel)))
		h.Write(n[:])
		io.WriteString(h, f.rel)
		binary.BigEndian.PutUint64(n[:], uint64(len(f.data)))
		h.Write(n[:])
		h.Write(f.data)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// readPackage reads a spec file or a package directory, sorted by path. A
// directory must hold aileron.connector.v1.json at its root and only
// regular files and directories: symbolic links and special files are
// refused, so nothing outside the directory is ever read.
func readPackage(path string) ([]pkgFile, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if info.Mode().IsRegular() {
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			return nil, err
		}
		data, err := cappedfile.Read(real, MaxSpecSize)
		if err != nil {
			return nil, err
		}
		return []pkgFile{{rel: SpecFileName, data: data}}, nil
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("%s is neither a spec file nor a package directory", path)
	}
	root, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, err
	}
	var files []pkgFile
	total := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch t := d.Type(); {
		case t&fs.ModeSymlink != 0:
			return fmt.Errorf("%s is a symbolic link; a package may only hold regular files (copy the target in instead)", rel)
		case t.IsDir():
			return nil
		case !t.IsRegular():
			return fmt.Errorf("%s is not a regular file (%s); remove it from the package", rel, t.Type())
		}
		if len(files) == MaxPackageFiles {
			return fmt.Errorf("the package has more than %d files; install a directory holding only the connector", MaxPackageFiles)
		}
		limit := int64(MaxPackageFileSize)
		if rel == SpecFileName {
			limit = MaxSpecSize
		}
		data, err := cappedfile.Read(p, limit)
		if err != nil {
			return fmt.Errorf("reading %s: %w", rel, err)
		}
		if total += len(data); total > MaxPackageSize {
			return fmt.Errorf("the package is larger than %d bytes; install a directory holding only the connector", MaxPackageSize)
		}
		files = append(files, pkgFile{rel: rel, data: data})
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(files, func(i, j int) bool { return files[i].rel < files[j].rel })
	if specData(files) == nil {
		return nil, fmt.Errorf("%s has no %s at its root; point at the spec file or its package directory", path, SpecFileName)
	}
	return files, nil
}

func specData(files []pkgFile) []byte {
	for _, f := range files {
		if f.rel == SpecFileName {
			if f.data == nil {
				return []byte{}
			}
			return f.data
		}
	}
	return nil
}

// writePackage writes files under dir (0700 directories, 0600 files) and
// syncs every file and directory.
func writePackage(dir string, files []pkgFile) error {
	dirs := map[string]bool{dir: true}
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		for d := filepath.Dir(p); d != dir && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
		out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		_, werr := out.Write(f.data)
		serr := out.Sync()
		cerr := out.Close()
		if err := errors.Join(werr, serr, cerr); err != nil {
			return err
		}
	}
	for d := range dirs {
		if err := atomicfile.SyncDir(d); err != nil {
			return err
		}
	}
	return nil
}

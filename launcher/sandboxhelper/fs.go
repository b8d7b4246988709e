package sandboxhelper

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/aileron-dev/aileron-proxy/api"
)

// The in-container helper: `aileron-proxy internal sandbox fs|exec`, run by
// `docker exec` in a long-lived sandbox as the sandbox user, from the
// static binary mounted read-only at GuardBinaryPath. It reads one JSON
// request line on stdin and answers with one JSON status line on stdout
// (helperStatus), followed for a read by the file's bytes. Running inside
// the container means the sandbox user's permissions apply and no path or
// symlink can reach the host.

// helperFSRequest is the request line of `internal sandbox fs`.
type FSRequest struct {
	Op        string `json:"op"`
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
	Force     bool   `json:"force,omitempty"`
	// Size is a write's byte count; fewer bytes on stdin fail with EIO.
	Size int64 `json:"size,omitempty"`
}

// File system operations of helperFSRequest.Op.
const (
	OpRead    = "read"
	OpWrite   = "write"
	OpStat    = "stat"
	OpReaddir = "readdir"
	OpMkdir   = "mkdir"
	OpRm      = "rm"
)

// helperStatus is the first line the helper prints.
type Status struct {
	Error *api.SandboxFSError `json:"error,omitempty"`
	Stat  *api.SandboxStat    `json:"stat,omitempty"`
	Names []string            `json:"names,omitempty"`
	// SandboxExecResult is exec's result, its fields inline; nil for fs.
	*api.SandboxExecResult
}

// RunSandboxFS is `internal sandbox fs`: one file operation with Node fs
// semantics (see docs/api.md). The request line comes first on stdin; for
// a write the file's bytes follow it. For a read the file's bytes follow
// the status line on stdout. It returns the process exit status: 0 when a
// status line was written (errors included), 2 on a malformed request.
func RunFS(stdin io.Reader, stdout io.Writer) int {
	var req FSRequest
	br, ok := readRequestLine(stdin, &req, "fs", "op and path", func() bool { return req.Path != "" })
	if !ok {
		return 2
	}
	st, payload := sandboxFS(req, br)
	if payload != nil {
		defer payload.Close()
	}
	out, _ := json.Marshal(st)
	if _, err := stdout.Write(append(out, '\n')); err != nil {
		return 1
	}
	if payload != nil {
		if _, err := io.Copy(stdout, payload); err != nil {
			return 1
		}
	}
	return 0
}

// readRequestLine reads the helper's JSON request line into v; valid
// checks what it needs. On failure it says so on stderr. The reader it
// returns holds the rest of stdin.
func readRequestLine(stdin io.Reader, v any, verb, needs string, valid func() bool) (*bufio.Reader, bool) {
	br := bufio.NewReader(stdin)
	line, err := br.ReadBytes('\n')
	if err != nil || json.Unmarshal(line, v) != nil || !valid() {
		fmt.Fprintf(os.Stderr, "internal sandbox %s: expected one JSON request line with %s on stdin\n", verb, needs)
		return nil, false
	}
	return br, true
}

// sandboxFS performs req; for a read, payload is the opened file.
//
// It is long because it is the one switch over the operations, each case
// with the file semantics the API promises (errors through fsError).
func sandboxFS(req FSRequest, body io.Reader) (st Status, payload *os.File) {
	p := req.Path
	fail := func(err error) (Status, *os.File) {
		return Status{Error: fsError(err, p)}, nil
	}
	switch req.Op {
	case OpRead:
		f, err := os.Open(p)
		if err != nil {
			return fail(err)
		}
		if fi, err := f.Stat(); err != nil || fi.IsDir() {
			f.Close()
			if err == nil {
				err = syscall.EISDIR
			}
			return fail(err)
		}
		return st, f
	case OpWrite:
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			return fail(syscall.EISDIR)
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o666)
		if err != nil {
			return fail(err)
		}
		n, err := io.Copy(f, io.LimitReader(body, req.Size))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil && n != req.Size {
			err = fmt.Errorf("got %d of %d bytes: %w", n, req.Size, syscall.EIO)
		}
		if err != nil {
			return fail(err)
		}
		return st, nil
	case OpStat:
		li, err := os.Lstat(p)
		if err != nil {
			return fail(err)
		}
		fi, err := os.Stat(p)
		if err != nil {
			return fail(err)
		}
		return Status{Stat: &api.SandboxStat{
			IsFile: fi.Mode().IsRegular(), IsDirectory: fi.IsDir(), IsSymbolicLink: li.Mode()&fs.ModeSymlink != 0,
			Size: fi.Size(), MtimeMs: float64(fi.ModTime().UnixNano()) / 1e6,
		}}, nil
	case OpReaddir:
		ents, err := os.ReadDir(p)
		if err != nil {
			return fail(err)
		}
		names := make([]string, len(ents))
		for i, e := range ents {
			names[i] = e.Name()
		}
		return Status{Names: names}, nil
	case OpMkdir:
		if !req.Recursive {
			if err := os.Mkdir(p, 0o777); err != nil {
				return fail(err)
			}
			return st, nil
		}
		if fi, err := os.Stat(p); err == nil {
			if !fi.IsDir() {
				return fail(syscall.EEXIST)
			}
			return st, nil
		}
		if err := os.MkdirAll(p, 0o777); err != nil {
			return fail(err)
		}
		return st, nil
	case OpRm:
		li, err := os.Lstat(p)
		switch {
		case err != nil && req.Force && errors.Is(err, fs.ErrNotExist):
			return st, nil
		case err != nil:
			return fail(err)
		case li.IsDir() && !req.Recursive:
			return fail(syscall.EISDIR)
		case li.IsDir():
			err = os.RemoveAll(p)
		default:
			err = os.Remove(p)
		}
		if err != nil {
			return fail(err)
		}
		return st, nil
	}
	return Status{Error: &api.SandboxFSError{Code: "EINVAL", Message: fmt.Sprintf("unknown operation %q", req.Op), Path: p}}, nil
}

// fsError turns an os error into the API's error, keeping the errno name
// Node would report.
func fsError(err error, path string) *api.SandboxFSError {
	code := "EIO"
	var errno syscall.Errno
	if errors.As(err, &errno) {
		if name := errnoName(errno); name != "" {
			code = name
		}
	}
	return &api.SandboxFSError{Code: code, Message: fmt.Sprintf("%s: %s", code, errorText(err)), Path: path}
}

// errorText is err's message without the *PathError's operation and path
// (the path travels in its own field).
func errorText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err.Error()
	}
	return err.Error()
}

// errnoName names the errnos the API maps; "" for others.
func errnoName(e syscall.Errno) string {
	switch e {
	case syscall.ENOENT:
		return "ENOENT"
	case syscall.EEXIST:
		return "EEXIST"
	case syscall.ENOTDIR:
		return "ENOTDIR"
	case syscall.EISDIR:
		return "EISDIR"
	case syscall.ENOTEMPTY:
		return "ENOTEMPTY"
	case syscall.EACCES:
		return "EACCES"
	case syscall.EPERM:
		return "EPERM"
	case syscall.ELOOP:
		return "ELOOP"
	case syscall.ENAMETOOLONG:
		return "ENAMETOOLONG"
	case syscall.EINVAL:
		return "EINVAL"
	case syscall.EROFS:
		return "EROFS"
	case syscall.ENOSPC:
		return "ENOSPC"
	case syscall.EBUSY:
		return "EBUSY"
	}
	return ""
}

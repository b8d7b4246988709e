package launcher

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/aileron-dev/aileron-proxy/api"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
	"github.com/aileron-dev/aileron-proxy/launcher/sandboxhelper"
)

// The daemon's side of the exec/files API: each call is one `docker exec`
// (or podman) of the in-container helper as the sandbox user, with the
// workdir as its working directory (sandboxfs.go, sandboxexec_linux.go).

// helperCall is one running helper.
type helperCall struct {
	sb *sandbox
	// ctx is the caller's: once it ends, a missing status is its error.
	ctx    context.Context
	stdinW *os.File
	out    *bufio.Reader
	outR   *io.PipeReader
	stderr *sandboxhelper.CappedBuffer
	// done closes when the runtime CLI has exited, with its error in err.
	done chan struct{}
	err  error
	end  func()
}

// startHelper starts `internal sandbox VERB` in the container and writes
// the request line to its stdin, which stays open (closeStdin ends it).
// The helper is not bound to ctx: when ctx ends its stdin is closed,
// which the exec helper takes as an abort.
func (sb *sandbox) startHelper(ctx context.Context, verb string, req any) (*helperCall, error) {
	cctx, end, err := sb.begin(ctx)
	if err != nil {
		return nil, err
	}
	line, err := json.Marshal(req)
	if err != nil {
		end()
		return nil, fmt.Errorf("encoding the helper request: %w", err)
	}
	// An *os.File, not an io.Pipe: exec.Cmd then copies nothing, so the
	// runtime CLI's exit is never held up by a stdin copier, and writes
	// fail (EPIPE) once it is gone and inR is closed.
	inR, inW, err := os.Pipe()
	if err != nil {
		end()
		return nil, fmt.Errorf("starting the sandbox helper: %w", err)
	}
	outR, outW := io.Pipe()
	c := &helperCall{sb: sb, ctx: ctx, stdinW: inW, out: bufio.NewReaderSize(outR, 64<<10), outR: outR, stderr: sandboxhelper.NewCappedBuffer(64 << 10), done: make(chan struct{}), end: end}
	info := sb.Info()
	// The runtime CLI outlives cctx by a bounded time: closing stdin (on
	// cctx's end) lets the helper stop what it started first.
	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		_, err := sb.rt.Exec(runCtx, runtime.ExecRequest{
			Container: info.Container, User: info.User, Workdir: info.Workdir,
			Cmd:   append(slices.Clone(sandboxHelperArgs), verb),
			Stdin: inR, Stdout: outW, Stderr: c.stderr,
		})
		outW.CloseWithError(io.EOF)
		inR.Close()
		c.err = err
		close(c.done)
		cancelRun()
	}()
	go func() {
		select {
		case <-cctx.Done():
		case <-runCtx.Done():
			return
		}
		inW.Close()
		// The helper kills everything within ExecKillGrace of its stdin's
		// end; then the runtime CLI goes too.
		select {
		case <-runCtx.Done():
		case <-time.After(sandboxhelper.ExecKillGrace + 5*time.Second):
			cancelRun()
		}
	}()
	if _, err := inW.Write(append(line, '\n')); err != nil {
		c.finish()
		return nil, sb.failed(err, c.stderr.String())
	}
	return c, nil
}

// status reads the helper's status line; a file error becomes
// *api.SandboxFSError. Without a status line the error is the caller's
// context's, once it ended (the helper was told to stop), else what
// sandbox.failed makes of the helper's end.
func (c *helperCall) status() (*sandboxhelper.Status, error) {
	line, err := c.out.ReadBytes('\n')
	if err != nil {
		c.finish()
		if err := c.ctx.Err(); err != nil {
			return nil, err
		}
		return nil, c.sb.failed(c.wait(), c.stderr.String())
	}
	var st sandboxhelper.Status
	if err := json.Unmarshal(line, &st); err != nil {
		c.finish()
		return nil, c.sb.failed(fmt.Errorf("unreadable helper status: %w", err), c.stderr.String())
	}
	if st.Error != nil {
		c.finish()
		return nil, st.Error
	}
	return &st, nil
}

// finish closes stdin, discards what is left of stdout and lets the
// helper end in the background.
func (c *helperCall) finish() {
	c.stdinW.Close()
	go func() {
		_, _ = io.Copy(io.Discard, c.outR)
		<-c.done
		c.end()
	}()
}

// wait waits for the runtime CLI and returns its error.
func (c *helperCall) wait() error {
	<-c.done
	return c.err
}

// Exec runs req.Command (see api.Sandbox and docs/api.md).
func (sb *sandbox) Exec(ctx context.Context, req api.SandboxExecRequest) (*api.SandboxExecResult, error) {
	c, err := sb.startHelper(ctx, "exec", sandboxhelper.ExecRequest{Command: req.Command, Cwd: req.Cwd, Env: req.Env, TimeoutMs: req.TimeoutMs})
	if err != nil {
		return nil, err
	}
	st, err := c.status()
	if err != nil {
		return nil, err
	}
	c.finish()
	if st.SandboxExecResult == nil {
		return nil, sb.failed(nil, c.stderr.String())
	}
	return st.SandboxExecResult, nil
}

// ReadFile streams the file at path.
func (sb *sandbox) ReadFile(ctx context.Context, path string) (io.ReadCloser, error) {
	c, err := sb.startHelper(ctx, "fs", sandboxhelper.FSRequest{Op: sandboxhelper.OpRead, Path: path})
	if err != nil {
		return nil, err
	}
	if _, err := c.status(); err != nil {
		return nil, err
	}
	c.stdinW.Close()
	return &helperReader{c: c}, nil
}

// helperReader is a read's payload; Close reports a helper that failed
// mid-stream.
type helperReader struct {
	c      *helperCall
	closed bool
}

func (r *helperReader) Read(p []byte) (int, error) { return r.c.out.Read(p) }

func (r *helperReader) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	_, _ = io.Copy(io.Discard, r.c.outR)
	err := r.c.wait()
	r.c.end()
	if code, ok := runtime.ExitCode(err); ok && code == 0 {
		err = nil
	}
	if err != nil {
		return r.c.sb.failed(err, r.c.stderr.String())
	}
	return nil
}

// WriteFile creates or truncates path with body; parents are not created.
// The body is spooled to a host temporary file first, so a request that
// fails midway never leaves a truncated file in the sandbox.
func (sb *sandbox) WriteFile(ctx context.Context, path string, body io.Reader) error {
	spool, err := os.CreateTemp("", "aileron-sandbox-write-*")
	if err != nil {
		return fmt.Errorf("spooling the file: %w", err)
	}
	defer os.Remove(spool.Name())
	defer spool.Close()
	size, err := io.Copy(spool, body)
	if err != nil {
		return err
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("spooling the file: %w", err)
	}
	c, err := sb.startHelper(ctx, "fs", sandboxhelper.FSRequest{Op: sandboxhelper.OpWrite, Path: path, Size: size})
	if err != nil {
		return err
	}
	_, cerr := io.Copy(c.stdinW, spool)
	c.stdinW.Close()
	if _, err = c.status(); err != nil {
		return err
	}
	c.finish()
	if cerr != nil {
		return sb.failed(cerr, c.stderr.String())
	}
	return nil
}

// FS runs stat, readdir, mkdir or rm.
func (sb *sandbox) FS(ctx context.Context, verb string, req api.SandboxFSRequest) (*api.SandboxFSResult, error) {
	c, err := sb.startHelper(ctx, "fs", sandboxhelper.FSRequest{Op: verb, Path: req.Path, Recursive: req.Recursive, Force: req.Force})
	if err != nil {
		return nil, err
	}
	st, err := c.status()
	if err != nil {
		return nil, err
	}
	c.finish()
	return &api.SandboxFSResult{Stat: st.Stat, Names: st.Names}, nil
}

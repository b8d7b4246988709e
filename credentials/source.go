package credentials

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// maxSourceOutput bounds what a file or command may produce.
const maxSourceOutput = 64 << 10

// sourceReader resolves one Source, caching command output for the
// configured TTL. Concurrent first reads of a command run it once.
type sourceReader struct {
	src  Source
	what string // "secret", "client secret" or "refresh token", for errors
	deps *deps

	group singleflight.Group

	mu       sync.Mutex
	cached   Value
	cachedAt time.Time
}

// resolveErr is a reason a secret could not be resolved. Its message is
// built by this package and never contains secret bytes; cause is only ever
// a context error.
type resolveErr struct {
	msg   string
	cause error
}

func (e *resolveErr) Error() string { return e.msg }
func (e *resolveErr) Unwrap() error { return e.cause }

func reasonf(format string, args ...any) error {
	return &resolveErr{msg: fmt.Sprintf(format, args...)}
}

// read returns the secret. Errors are *resolveErr.
func (s *sourceReader) read(ctx context.Context) (Value, error) {
	var v Value
	var err error
	switch s.src.Type {
	case SourceStored:
		// Checked once, by Binding.Validate in NewResolver.
		return s.src.Value, nil
	case SourceEnv:
		raw := s.deps.getenv(s.src.Ref)
		if raw == "" {
			return Value{}, reasonf("environment variable %s is not set in the daemon's environment; export it before starting `aileron-proxy serve`", s.src.Ref)
		}
		v = NewValue(trimNewline(raw))
	case SourceFile:
		v, err = readSecretFile(s.src.Ref)
	case SourceExec:
		v, err = s.readExec(ctx)
	default:
		return Value{}, reasonf("source type %q is not valid", s.src.Type)
	}
	if err != nil {
		return Value{}, err
	}
	if err := CheckSecret(v); err != nil {
		return Value{}, reasonf("the %s from %s is not usable: %s", s.what, s.src.Describe(), err.Error())
	}
	return v, nil
}

func readSecretFile(path string) (Value, error) {
	fh, err := os.Open(path)
	if err != nil {
		return Value{}, reasonf("reading file %s: %s", path, pathErrText(err))
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, maxSourceOutput+1))
	if err != nil {
		return Value{}, reasonf("reading file %s: %s", path, pathErrText(err))
	}
	if len(data) > maxSourceOutput {
		return Value{}, reasonf("file %s is larger than %d bytes; point the credential at a file holding only the secret", path, maxSourceOutput)
	}
	return NewValue(trimNewline(string(data))), nil
}

// pathErrText renders a file error without repeating the path.
func pathErrText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return "read failed"
}

// trimNewline removes trailing line breaks, as shells and editors add them.
func trimNewline(s string) string { return strings.TrimRight(s, "\r\n") }

// cachedExec returns the command output cached within the TTL.
func (s *sourceReader) cachedExec() (Value, bool) {
	ttl := s.deps.execCacheTTL
	if ttl <= 0 {
		return Value{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cached.IsZero() || s.deps.now().Sub(s.cachedAt) >= ttl {
		return Value{}, false
	}
	return s.cached, true
}

func (s *sourceReader) readExec(ctx context.Context) (Value, error) {
	ttl := s.deps.execCacheTTL
	if v, ok := s.cachedExec(); ok {
		return v, nil
	}
	ch := s.group.DoChan("exec", func() (any, error) {
		// A run that finished after the check above has filled the cache.
		if v, ok := s.cachedExec(); ok {
			return v, nil
		}
		// Detached from the first caller, so its cancellation does not fail
		// the callers sharing this run; bounded by ExecTimeout.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.deps.execTimeout)
		defer cancel()
		out, err := runCommand(rctx, s.src.Ref, s.deps.execTimeout)
		if err != nil {
			return nil, err
		}
		v := NewValue(trimNewline(out))
		if ttl > 0 && !v.IsZero() {
			s.mu.Lock()
			s.cached, s.cachedAt = v, s.deps.now()
			s.mu.Unlock()
		}
		return v, nil
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return Value{}, res.Err
		}
		return res.Val.(Value), nil
	case <-ctx.Done():
		return Value{}, &resolveErr{msg: "waiting for the credential command: " + ctx.Err().Error(), cause: ctx.Err()}
	}
}

// runCommand runs command with /bin/sh -c and returns its stdout. Stderr is
// discarded: it may echo the secret, so failures report only the exit
// status.
func runCommand(ctx context.Context, command string, timeout time.Duration) (string, error) {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
	var out limitedBuffer
	cmd.Stdout = &out
	cmd.Stderr = nil
	cmd.Stdin = nil
	setProcessGroup(cmd)
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()
	quoted := shellQuote(command)
	switch {
	case ctx.Err() != nil:
		return "", &resolveErr{msg: fmt.Sprintf("running credential command %s: timed out after %s", quoted, timeout), cause: context.DeadlineExceeded}
	case out.overflow:
		return "", reasonf("running credential command %s: it printed more than %d bytes; print only the secret", quoted, maxSourceOutput)
	case err != nil:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", reasonf("running credential command %s: exited %d (run it yourself to see why)", quoted, ee.ExitCode())
		}
		return "", reasonf("running credential command %s: could not start /bin/sh", quoted)
	case out.Len() == 0:
		return "", reasonf("running credential command %s: it printed nothing", quoted)
	}
	return out.String(), nil
}

// limitedBuffer keeps at most maxSourceOutput bytes and notes overflow. It
// does not embed bytes.Buffer, whose ReadFrom would bypass the limit.
type limitedBuffer struct {
	buf      bytes.Buffer
	overflow bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.buf.Len()+len(p) > maxSourceOutput {
		b.overflow = true
		return 0, errors.New("output too large")
	}
	return b.buf.Write(p)
}

func (b *limitedBuffer) Len() int       { return b.buf.Len() }
func (b *limitedBuffer) String() string { return b.buf.String() }

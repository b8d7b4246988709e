package sandboxhelper

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/aileron-dev/aileron-proxy/api"
)

// helperExecRequest is the request line of `internal sandbox exec`.
type ExecRequest struct {
	Command string `json:"command"`
	// Cwd is the working directory; empty means the helper's own (docker
	// exec -w sets it to the workdir).
	Cwd string `json:"cwd,omitempty"`
	// Env is layered over the container's environment.
	Env       map[string]string `json:"env,omitempty"`
	TimeoutMs int64             `json:"timeoutMs,omitempty"`
}

// layerEnv returns base (KEY=VALUE entries) with over set on top.
func layerEnv(base []string, over map[string]string) []string {
	out := make([]string, 0, len(base)+len(over))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := over[k]; !ok {
			out = append(out, kv)
		}
	}
	for k, v := range over {
		out = append(out, k+"="+v)
	}
	return out
}

// cappedBuffer keeps the first max bytes written to it and drops the rest,
// remembering that it did.
type CappedBuffer struct {
	mu      sync.Mutex
	buf     []byte
	max     int
	dropped bool
}

func (b *CappedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	room := b.max - len(b.buf)
	if room < len(p) {
		b.dropped = true
		if room > 0 {
			b.buf = append(b.buf, p[:room]...)
		}
		return len(p), nil
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// note appends s even past the cap.
func (b *CappedBuffer) note(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, s...)
}

func (b *CappedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// truncated reports whether output was dropped.
func (b *CappedBuffer) truncated() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dropped
}

// truncationNote is the line appended to stderr when the cap dropped
// output of stdout or stderr, naming the streams and the cap, so a cut
// output is never taken for a whole one; "" when nothing was dropped.
func truncationNote(stdout, stderr *CappedBuffer) string {
	var cut []string
	if stdout.truncated() {
		cut = append(cut, "stdout")
	}
	if stderr.truncated() {
		cut = append(cut, "stderr")
	}
	if len(cut) == 0 {
		return ""
	}
	return fmt.Sprintf("\n[aileron] output truncated: %s exceeded %d bytes (%d MiB), the cap of each stream; the rest was dropped\n",
		strings.Join(cut, " and "), api.SandboxExecMaxOutput, api.SandboxExecMaxOutput>>20)
}

// Exec API constants.
const (
	// ExecTimeoutExitCode is the exit status of a command that reached its
	// timeoutMs, whatever it did on SIGTERM (as timeout(1) reports).
	ExecTimeoutExitCode = 124
	// ExecKillGrace is how long a command has between SIGTERM and SIGKILL.
	ExecKillGrace = 2 * time.Second
)

// newCappedBuffer keeps the first max bytes written to it.
func NewCappedBuffer(max int) *CappedBuffer { return &CappedBuffer{max: max} }

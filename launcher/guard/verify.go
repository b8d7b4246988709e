package guard

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
)

// Verify checks that the namespace of the running holder container still
// holds exactly the egress guard Start would install for allow, and
// installs it again (apply, which verifies what the kernel then holds)
// when it does not: a restarted daemon calls it before it serves a
// sandbox it finds again. reapplied reports whether the rules had to be
// installed again. A non-nil error means the guard could not be
// confirmed, and nothing may run in the namespace any more.
func Verify(ctx context.Context, rt runtime.Runtime, holder string, allow []netip.AddrPort) (reapplied bool, err error) {
	rs, err := Rules(allow)
	if err != nil {
		return false, err
	}
	want := rs.Lines()
	var out, errb bytes.Buffer
	code, err := rt.Exec(ctx, runtime.ExecRequest{Container: holder, Cmd: helperCmd("show"), Stdout: &out, Stderr: &errb})
	if err != nil {
		return false, fmt.Errorf("reading the egress guard in %s: %w", holder, err)
	}
	if code == 0 && slices.Equal(strings.Split(strings.TrimSpace(out.String()), "\n"), want) {
		return false, nil
	}
	if runtime.ContainerStateOf(errb.String()).IsUnusable() {
		return false, fmt.Errorf("reading the egress guard in %s: the holder container is gone or stopped", holder)
	}
	if _, err := apply(ctx, rt, holder, allow); err != nil {
		return true, fmt.Errorf("installing the egress guard again in %s: %w", holder, err)
	}
	return true, nil
}

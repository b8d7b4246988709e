package launcher

import "github.com/aileron-dev/aileron-proxy/launcher/runtime"

// SandboxBinary is where every sandbox (`launch` and `sandbox up`) has the
// static aileron-proxy, read-only, on PATH next to the shims, so that an
// agent starts `aileron-proxy mcp` (the session's MCP server over stdio)
// with nothing installed in its image. It is the binary the egress guard
// runs (LaunchConfig.GuardBinary, checked static by guard.Helper).
const SandboxBinary = SandboxShimsDir + "/aileron-proxy"

// sandboxBinaryMount mounts the static binary bin at SandboxBinary.
// "aileron-proxy" is a basic command (shims.BasicCommands), so no shim
// takes that path.
func sandboxBinaryMount(bin string) runtime.Mount {
	return runtime.Mount{Source: bin, Target: SandboxBinary, ReadOnly: true}
}

// Package launcher composes and prepares the container an agent runs in.
//
// It reads the project's .devcontainer/devcontainer.json (JSON with comments
// and trailing commas), picks one of three tiers and builds or selects the
// image:
//
//   - Tier 0, no devcontainer: aileron/sandbox-base:<version>, built from the
//     definition embedded in this binary (Debian slim, ca-certificates, curl,
//     wget, user agent, /home/agent/workspace; no language runtimes).
//   - Tier 1, devcontainer: its Dockerfile is built (after the base image when
//     the Dockerfile extends it), or its image is used as is.
//   - Tier 2, customizations.aileron.image: a bring-your-own image, used as
//     supplied.
//
// Container runtimes are driven through their CLIs (docker or podman) behind
// the small Runtime interface; arguments are always passed as an argv, never
// through a shell, and secret environment values never appear in argv.
//
// Check runs the runtime-contract validations in a throwaway container.
//
// Launch confines the agent: guard.Start gives the sandbox a network
// namespace held by a CAP_NET_ADMIN-only container whose nftables egress
// guard (guard.Rules, a pure function) lets out only TCP to the session's
// relays; the agent joins it with every capability dropped.
// ResolveAgentUser picks the agent's user (devcontainer
// updateRemoteUserUID).
package launcher

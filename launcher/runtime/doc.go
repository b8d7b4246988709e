// Package runtime is the one abstraction over the Docker and Podman CLIs:
// building and running images, exec in a running container, networks,
// container removal, and reading what the CLI said (ContainerStateOf).
// The differences between the two engines (host alias, network DNS,
// subnet picking, removal without a stop timeout) live here and nowhere
// else. It knows nothing of devcontainers, sessions or the egress guard.
package runtime

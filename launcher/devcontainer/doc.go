// Package devcontainer reads a project's devcontainer.json (JSONC): the
// settings the sandbox honours, the ones it refuses (with where and why),
// variable substitution (${localEnv:...}, ${containerEnv:...} and the
// rest), features (references, metadata, their install order), mounts and
// the rules a mount must keep, users, and lifecycle command definitions.
// It starts no container and opens no connection: fetching OCI features,
// building images and running commands are the launcher's.
package devcontainer

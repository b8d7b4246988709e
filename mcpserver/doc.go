// Package mcpserver serves a session's connector operations and actions as
// Model Context Protocol tools. The catalog (names, input schemas,
// annotations) is built from the policy snapshot; a tool call is posted to
// the control API's run endpoint (or an action's run endpoint), so policy,
// credentials, approvals, scrubbing and audit are the ones the shims get.
// Bridge serves the same tools over stdio by relaying to the control API's
// /v1/mcp endpoint.
package mcpserver

// Package credentials holds every secret aileron-proxy injects into upstream
// requests, and nothing else does.
//
// The model is a File (credentials.json, 0600) of Bindings keyed by
// (connector FQN, Kind). A Binding names where the secret comes from (an
// environment variable, a file, a command, a stored value or an OAuth2 refresh
// grant) and where it goes on the outbound request (a header with a format,
// a query parameter, or HTTP Basic). A Resolver is built from one File
// snapshot; Resolver.Lookup returns an Injector whose Apply resolves the secret,
// sets it on the outbound request and returns a Scrubber that masks every form
// of the injected secret (raw, base64, URL-encoded) in response headers and
// streamed bodies.
//
// Secret bytes live in a Value, which renders as "[REDACTED]" through fmt,
// encoding/json, encoding.TextMarshaler, zap and slog; only Value.Reveal
// returns them, and only the injector calls it. Errors returned by this
// package never contain secret bytes.
//
// The package depends on no other package of this module.
package credentials

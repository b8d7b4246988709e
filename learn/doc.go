// Package learn owns learn mode's data: the learn record of a session (one
// JSON line per request the proxy forwarded without credentials because no
// operation matched it and its host matched the session's learn patterns),
// the shapes recorded of each request (query parameter names with the type
// of their values, top-level JSON body keys with their types, never a
// value), and the drafting of an aileron.connector.v1 spec from a record.
//
// The proxy writes records through a Recorder; `connector draft` reads them.
// Path segment values are kept in the record, because templates are inferred
// from them, and nowhere else: the audit path of a learned request is
// MaskPath's shape. The package is pure apart from the record files: no
// network, no logging globals, no HTTP types.
package learn

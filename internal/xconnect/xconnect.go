// Package xconnect turns on HTTP/2 extended CONNECT (RFC 8441) in Go's
// HTTP/2 server, so that a client may open a WebSocket over an HTTP/2
// connection to the proxy. Go enables it only with GODEBUG=http2xconnect=1,
// which net/http (and x/net/http2) read from the environment once, in their
// package initialization; there is no API for it.
//
// Importing this package (blank, from package main) adds the setting to the
// environment before those packages initialize: since Go 1.21, packages are
// initialized in import-path order among those whose imports are done, and
// this package imports only os and strings and sorts before "golang.org/..."
// and "net/http". Set GODEBUG=http2xconnect=0 to keep extended CONNECT off.
package xconnect

import (
	"os"
	"strings"
)

// Setting is the GODEBUG entry this package adds.
const Setting = "http2xconnect=1"

func init() {
	v := os.Getenv("GODEBUG")
	if strings.Contains(v, "http2xconnect=") {
		return // the operator chose
	}
	if v != "" {
		v += ","
	}
	_ = os.Setenv("GODEBUG", v+Setting)
}

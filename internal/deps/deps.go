//go:build tools

// Package deps pins the chosen dependencies until the packages that import them land.
package deps
import (
 _ "github.com/elazarl/goproxy"
 _ "go.step.sm/crypto/x509util"
 _ "go.step.sm/crypto/keyutil"
 _ "golang.org/x/net/http2"
 _ "github.com/labstack/echo/v4"
 _ "go.uber.org/zap"
 _ "github.com/spf13/cobra"
 _ "github.com/tailscale/hujson"
 _ "github.com/prometheus/client_golang/prometheus"
 _ "golang.org/x/oauth2"
 _ "golang.org/x/mod/semver"
 _ "golang.org/x/sync/singleflight"
)

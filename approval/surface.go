package approval

import "fmt"

// Surface says where a session's held requests are put before a person:
// customizations.aileron.approval_surface of the project a session was
// launched for. The zero value means SurfaceBoth.
type Surface string

// Surfaces.
const (
	// SurfaceBoth: the web console and the terminal (launch's line).
	SurfaceBoth Surface = "both"
	// SurfaceCLI: the terminal only; the web console shows the request
	// but does not decide it (`aileron-proxy approvals` does).
	SurfaceCLI Surface = "cli"
	// SurfaceAPI: the API and the web console only; launch prints no line.
	SurfaceAPI Surface = "api"
)

// String returns the spelling; the zero value is "both".
func (s Surface) String() string {
	if s == "" {
		return string(SurfaceBoth)
	}
	return string(s)
}

// ParseSurface parses "both", "cli", "api" or "" (both).
func ParseSurface(s string) (Surface, error) {
	switch Surface(s) {
	case "", SurfaceBoth:
		return SurfaceBoth, nil
	case SurfaceCLI, SurfaceAPI:
		return Surface(s), nil
	}
	return "", fmt.Errorf("approval_surface %q is not valid; use \"both\", \"cli\" or \"api\"", s)
}

// IsConsole reports whether the web console may decide requests of a
// session with this surface.
func (s Surface) IsConsole() bool { return s != SurfaceCLI }

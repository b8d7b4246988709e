package launcher

import (
	"os"
	"testing"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// TestMain removes the images this package's tests built (projects, user
// and feature tiers), keeping the shared base image.
func TestMain(m *testing.M) {
	sweep := testkit.SweepImages("aileron", BaseRepository)
	code := m.Run()
	sweep()
	os.Exit(code)
}

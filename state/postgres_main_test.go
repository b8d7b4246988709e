package state

import (
	"testing"

	"github.com/aileron-dev/aileron-proxy/internal/pgtest"
)

// TestMain shares one PostgreSQL server among the package's tests.
func TestMain(m *testing.M) { pgtest.Main(m) }

package bench

import (
	"os"
	"testing"

	"github.com/m2md/m2md/internal/leakcheck"
)

// TestMain fails the run if goroutines of m2md or its network libraries
// outlive the tests.
func TestMain(m *testing.M) { os.Exit(leakcheck.Main(m)) }

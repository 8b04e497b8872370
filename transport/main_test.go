package transport

import (
	"os"
	"testing"

	"github.com/m2md/m2md/internal/leakcheck"
)

// TestMain fails the run if goroutines of m2md or its network libraries
// outlive the tests, then removes the tests' certificates.
func TestMain(m *testing.M) {
	code := leakcheck.Main(m)
	if certDir != "" {
		os.RemoveAll(certDir)
	}
	os.Exit(code)
}

package transport

import (
	"os"
	"testing"
)

var certDir string

func mkTemp() (string, error) {
	d, err := os.MkdirTemp("", "m2md-transport-test-*")
	certDir = d
	return d, err
}

func TestMain(m *testing.M) {
	code := m.Run()
	if certDir != "" {
		os.RemoveAll(certDir)
	}
	os.Exit(code)
}

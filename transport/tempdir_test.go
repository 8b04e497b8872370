package transport

import "os"

var certDir string

func mkTemp() (string, error) {
	d, err := os.MkdirTemp("", "m2md-transport-test-*")
	certDir = d
	return d, err
}

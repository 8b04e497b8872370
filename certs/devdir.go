package certs

import (
	"fmt"
	"os"
	"path/filepath"
)

// DefaultDevDir is where the development certificate lives unless a caller
// names another folder: m2md/certs under the user's configuration directory
// (os.UserConfigDir: $XDG_CONFIG_HOME or ~/.config on Linux, ~/Library/
// Application Support on macOS, %AppData% on Windows).
//
// One folder per user, not per working directory, so that the daemon and
// every agent the same user starts find the same certificate to pin from any
// folder. The configuration directory rather than an XDG state directory:
// the standard library resolves it on every platform, and the certificate is
// what agents are configured to trust, not a cache that may be thrown away
// (a new one changes the fingerprint every agent has pinned).
func DefaultDevDir() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("certs: no folder for the development certificate: %w", err)
	}
	return filepath.Join(dir, "m2md", "certs"), nil
}

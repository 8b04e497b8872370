//go:build !unix

package bench

import "time"

// processCPU is not measured on this platform: CPU figures read zero.
func processCPU() time.Duration { return 0 }

// runDelay is not measured on this platform.
func runDelay() time.Duration { return 0 }

// machineIdle is not measured on this platform.
func machineIdle() (time.Duration, bool) { return 0, false }

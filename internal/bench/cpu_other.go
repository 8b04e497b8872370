//go:build !unix

package bench

import "time"

// processCPU is not measured on this platform: CPU figures read zero.
func processCPU() time.Duration { return 0 }

// runDelay is not measured on this platform.
func runDelay() time.Duration { return 0 }

// machineCPU is not measured on this platform.
func machineCPU() (statCPU, bool) { return statCPU{}, false }

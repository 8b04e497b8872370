//go:build !unix

package bench

import "time"

// processCPU is not measured on this platform: CPU figures read zero.
func processCPU() time.Duration { return 0 }

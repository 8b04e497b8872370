//go:build !linux

package bench

import "time"

// precisePace: precise sleeps are only set up on Linux; elsewhere the
// pacer uses Go's timer alone.
func precisePace() bool { return false }

func sleepPrecisely(d time.Duration) { time.Sleep(d) }

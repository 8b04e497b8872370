//go:build race

package bufpool

// sync.Pool drops items at random under the race detector, so allocation
// counts are meaningless there.
const raceEnabled = true

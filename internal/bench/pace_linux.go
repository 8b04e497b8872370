package bench

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// precisePace readies the calling thread, which must be locked to its
// goroutine, for sleepPrecisely: a timer slack of 1 ns instead of the
// default 50 µs, which the kernel may otherwise add to every sleep to
// batch wake-ups.
func precisePace() bool {
	return unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0) == nil
}

// sleepPrecisely sleeps d on a high-resolution timer. It blocks its
// thread, so it is only used for short waits on the pacer's own thread.
func sleepPrecisely(d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	for {
		var rem unix.Timespec
		err := unix.Nanosleep(&ts, &rem)
		if !errors.Is(err, unix.EINTR) {
			return
		}
		ts = rem // a signal (the Go runtime's preemption) cut it short
	}
}

package daemon

import (
	"context"
	"testing"
)

// TestKickAllocatesNothing: starting a session's writer, which happens for
// every batch it writes, allocates nothing (a go statement on a method
// value allocates its closure each time).
func TestKickAllocatesNothing(t *testing.T) {
	se := &session{}
	se.ctx, se.cancel = context.WithCancel(context.Background())
	se.cancel() // the writer returns at once
	se.drainFn = se.drain
	kick := func() {
		se.kick()
		se.writers.Wait()
	}
	kick() // the runtime's first goroutine of this shape
	if n := testing.AllocsPerRun(200, kick); n != 0 {
		t.Errorf("kick allocates %.1f times", n)
	}
}

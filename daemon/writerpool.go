package daemon

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"
)

// writerPool runs the sessions' writers (writer.go) on goroutines that
// outlive one batch. A writer started by a go statement begins on a 2 KiB
// stack and would grow it again in every batch inside the transport's write
// (the WebSocket library takes its locks in a select): copying stacks costs
// 4–6% of a loaded daemon's CPU (docs/benchmarks.md, "Where the time
// goes"). A worker whose writer has finished waits for the next one instead
// of exiting, so its grown stack is used again.
//
// The pool never makes a writer wait: when no worker is idle, the writer
// gets a goroutine of its own. A writer can block for as long as
// its peer does not read (up to the stall timeout), so a fixed set of
// workers would let one slow agent hold up the others. Idle workers are
// capped at maxIdle, and they belong to the daemon, not to sessions, so an
// idle session still costs no writer goroutine; and once no writer has
// started for a retireAfter, the idle workers leave too (retire), so a
// daemon at rest is back to its own goroutines.
type writerPool struct {
	work    chan *session // unbuffered: a send succeeds only if a worker waits
	leave   chan struct{} // unbuffered: the idle worker that takes it exits
	idle    atomic.Int32
	maxIdle int32
	used    atomic.Bool   // a writer started since retire last looked
	done    chan struct{} // closed when the daemon stops: idle workers exit
	closed  atomic.Bool
	spawned atomic.Int64 // goroutines started: what the pool did not save
}

// retireAfter: idle workers leave after this long without a writer
// starting. Under load writers start thousands of times a second; an
// agent's pauses of a second or more cost a few new goroutines after.
const retireAfter = time.Second

func newWriterPool() *writerPool {
	return &writerPool{
		work:  make(chan *session),
		leave: make(chan struct{}),
		// Enough for the writers a loaded daemon runs at once (8 busy
		// sessions needed more than 4 on two cores); at most 16 or 4 per
		// P stay, their stacks 8 KiB each, whatever the session count.
		maxIdle: int32(max(16, 4*runtime.GOMAXPROCS(0))),
		done:    make(chan struct{}),
	}
}

// start runs se's writer: on an idle worker if one waits, else on a new
// goroutine that joins the pool when the writer is done.
func (p *writerPool) start(se *session) {
	if !p.used.Load() {
		p.used.Store(true) // once per retireAfter, not once per batch
	}
	select {
	case p.work <- se:
	default:
		p.spawned.Add(1)
		go se.runWriter() // p.run(se), bound once per session
	}
}

func (p *writerPool) run(se *session) {
	for {
		se.drain()
		se = nil // an idle worker must not keep a departed session alive
		if p.idle.Add(1) > p.maxIdle {
			p.idle.Add(-1)
			return
		}
		select {
		case se = <-p.work:
			p.idle.Add(-1)
		case <-p.leave:
			p.idle.Add(-1)
			return
		case <-p.done:
			p.idle.Add(-1)
			return
		}
	}
}

// retire lets the idle workers go once no writer has started for a
// retireAfter, until ctx ends.
func (p *writerPool) retire(ctx context.Context) {
	t := time.NewTicker(retireAfter)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			p.tick()
		case <-ctx.Done():
			return
		}
	}
}

// tick retires the idle workers if no writer started since the last tick.
func (p *writerPool) tick() {
	if !p.used.Swap(false) {
		p.retireIdle()
	}
}

// retireIdle sends every idle worker away.
func (p *writerPool) retireIdle() {
	for p.idle.Load() > 0 {
		select {
		case p.leave <- struct{}{}:
		default:
			// The count is ahead of a worker still on its way into its
			// select: the next tick takes it.
			return
		}
	}
}

// close lets the idle workers go; writers still running exit when done.
func (p *writerPool) close() {
	if p.closed.CompareAndSwap(false, true) {
		close(p.done)
	}
}

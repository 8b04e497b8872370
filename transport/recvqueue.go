package transport

import (
	"context"
	"sync"
)

// recvQueue connects the goroutines that read the network (producers, one
// per QUIC stream or one per WebSocket) to the single goroutine that calls
// Receive. It is bounded in messages and in bytes: a producer that finds it
// full waits, which stops it reading and so pushes back on the peer.
//
// A connection-level failure (fail) is delivered after the messages already
// queued, so a peer's last words (REJECT, CLOSE) are not lost to the close
// that follows them. A local close (close) drops everything at once.
//
// The ring starts with initialRecvSlots slots and doubles as messages pile
// up, up to maxItems: most connections are idle or have one message in
// flight, and a full-size ring per connection is a large share of an idle
// session's memory. It never shrinks; a connection that once needed the
// room is likely to need it again.
type recvQueue struct {
	mu       sync.Mutex
	space    sync.Cond // producers wait here for room
	items    []queued  // ring buffer
	head, n  int
	bytes    int
	maxItems int
	maxBytes int
	err      error // terminal error, returned once items are drained
	closed   bool

	ready chan struct{} // cap 1: "an item or the error may be there"
	done  chan struct{} // closed by close
}

type queued struct {
	msg Message
	err error
}

// initialRecvSlots is the ring's starting size: enough for a request and
// its control traffic without growing.
const initialRecvSlots = 4

func newRecvQueue(maxItems, maxBytes int) *recvQueue {
	maxItems = max(maxItems, 1)
	q := &recvQueue{
		items:    make([]queued, min(maxItems, initialRecvSlots)),
		maxItems: maxItems,
		maxBytes: maxBytes,
		ready:    make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
	q.space.L = &q.mu
	return q
}

func (q *recvQueue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// push queues msg, waiting for room. It fails (and the caller keeps
// ownership of msg) once the queue is closed or failed.
func (q *recvQueue) push(msg Message) error {
	size := len(msg.Data)
	q.mu.Lock()
	for !q.closed && q.err == nil &&
		(q.n >= q.maxItems || (q.n > 0 && q.bytes+size > q.maxBytes)) {
		q.space.Wait()
	}
	if q.closed || q.err != nil {
		err := q.err
		q.mu.Unlock()
		if err == nil {
			err = ErrClosed
		}
		return err
	}
	if q.n == len(q.items) {
		// Room by count (q.n < maxItems), so len(q.items) < maxItems.
		q.grow(min(2*len(q.items), q.maxItems))
	}
	q.items[(q.head+q.n)%len(q.items)] = queued{msg: msg}
	q.n++
	q.bytes += size
	if q.n < q.maxItems && q.bytes < q.maxBytes {
		// pop wakes one producer per message taken; pass the turn on while
		// there is room so waiting producers are not left behind.
		q.space.Signal()
	}
	q.mu.Unlock()
	q.signal()
	return nil
}

// pushErr queues an error that concerns one channel only. Such errors are
// few (at most one per stream) and tiny, so they bypass the bounds: a full
// queue must not hide them, and blocking here could stall a reader that is
// about to exit.
func (q *recvQueue) pushErr(err error) {
	q.mu.Lock()
	if q.closed || q.err != nil {
		q.mu.Unlock()
		return
	}
	if q.n == len(q.items) {
		q.grow(2 * len(q.items))
	}
	q.items[(q.head+q.n)%len(q.items)] = queued{err: err}
	q.n++
	q.mu.Unlock()
	q.signal()
}

// grow moves the ring into size slots (size > q.n), oldest item first.
// The caller holds q.mu.
func (q *recvQueue) grow(size int) {
	grown := make([]queued, size)
	for i := 0; i < q.n; i++ {
		grown[i] = q.items[(q.head+i)%len(q.items)]
	}
	q.items, q.head = grown, 0
}

// fail records the connection's terminal error; Receive returns it after
// the messages already queued. Only the first error counts.
func (q *recvQueue) fail(err error) {
	q.mu.Lock()
	if q.closed || q.err != nil {
		q.mu.Unlock()
		return
	}
	q.err = err
	q.space.Broadcast()
	q.mu.Unlock()
	q.signal()
}

// close drops everything queued and makes every later pop and push fail
// with ErrClosed.
func (q *recvQueue) close() {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.closed = true
	for ; q.n > 0; q.n-- {
		it := &q.items[q.head]
		it.msg.Release()
		*it = queued{}
		q.head = (q.head + 1) % len(q.items)
	}
	q.bytes = 0
	q.space.Broadcast()
	q.mu.Unlock()
	close(q.done)
}

// pop returns the next message or error; only one goroutine may call it.
func (q *recvQueue) pop(ctx context.Context) (Message, error) {
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return Message{}, ErrClosed
		}
		if q.n > 0 {
			it := q.items[q.head]
			q.items[q.head] = queued{}
			q.head = (q.head + 1) % len(q.items)
			q.n--
			q.bytes -= len(it.msg.Data)
			q.space.Signal()
			q.mu.Unlock()
			return it.msg, it.err
		}
		if q.err != nil {
			err := q.err
			q.mu.Unlock()
			return Message{}, err
		}
		q.mu.Unlock()
		select {
		case <-q.ready:
		case <-q.done:
		case <-ctx.Done():
			return Message{}, ctx.Err()
		}
	}
}

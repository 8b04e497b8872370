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
// The byte bound is the connection's receive budget. A QUIC stream reader
// reserves a message's declared length before it reads the body, so the
// bytes of messages being read and of messages waiting for Receive together
// stay within the budget however many streams the peer opens; a reader
// that cannot reserve waits, and QUIC flow control holds the peer. QUIC's
// control stream has a budget of its own (controlBudget), so PING, PONG and
// CLOSE never wait behind data. A message larger than its whole budget is
// admitted when nothing else holds any of it.
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
	mu      sync.Mutex
	space   sync.Cond // producers wait here for a slot or for budget
	items   []queued  // ring buffer
	head, n int
	held    [2]int // bytes queued and reserved, by pool
	bound   [2]int // each pool's budget
	// ticket and serving hand out each pool's budget in the order the
	// messages' length prefixes were read (reserve).
	ticket, serving [2]uint64
	maxItems        int
	err             error // terminal error, returned once items are drained
	closed          bool

	ready chan struct{} // cap 1: "an item or the error may be there"
	done  chan struct{} // closed by close
}

type queued struct {
	msg  Message
	err  error
	pool pool
}

// pool names a share of the receive budget.
type pool int8

const (
	dataPool    pool = iota
	controlPool      // QUIC's control stream
)

// controlBudget is the control pool's budget: one control message of the
// protocol's maximum size (docs/protocol.md §1).
const controlBudget = DefaultReadLimit

// initialRecvSlots is the ring's starting size: enough for a request and
// its control traffic without growing.
const initialRecvSlots = 4

func newRecvQueue(maxItems, maxBytes int) *recvQueue {
	maxItems = max(maxItems, 1)
	q := &recvQueue{
		items:    make([]queued, min(maxItems, initialRecvSlots)),
		maxItems: maxItems,
		bound:    [2]int{maxBytes, controlBudget},
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

// reserve takes n bytes of pool p's budget for a message about to be read,
// waiting while the budget is spent. It fails once the queue is closed or
// failed; on success the caller either pushReserved's a message of exactly
// n bytes or gives the bytes back with unreserve.
//
// Waiters are served in the order they came. Budget freed to whichever
// waiter woke first could go to the stream whose body is still on its way
// while the QUIC connection's window is full of the bodies of streams that
// wait for budget: that stream's body could then never arrive, and the
// connection stopped taking bytes until MessageTimeout. A peer writing one
// message after another (the daemon) is read in its order this way.
func (q *recvQueue) reserve(n int, p pool) error {
	q.mu.Lock()
	t := q.ticket[p]
	q.ticket[p]++
	for !q.closed && q.err == nil && (q.serving[p] != t || q.held[p] > 0 && q.held[p]+n > q.bound[p]) {
		q.space.Wait()
	}
	if err := q.stateErr(); err != nil {
		q.mu.Unlock()
		return err
	}
	q.held[p] += n
	q.serving[p]++
	q.space.Broadcast() // the next in line may fit too
	q.mu.Unlock()
	return nil
}

// unreserve gives back bytes reserve took for a message that was not read.
func (q *recvQueue) unreserve(n int, p pool) {
	q.mu.Lock()
	q.held[p] -= n
	q.space.Broadcast()
	q.mu.Unlock()
}

// stateErr is why producers must stop, or nil; the caller holds q.mu.
func (q *recvQueue) stateErr() error {
	switch {
	case q.err != nil:
		return q.err
	case q.closed:
		return ErrClosed
	}
	return nil
}

// push reserves msg's bytes and queues it, waiting for room. It fails (and
// the caller keeps ownership of msg) once the queue is closed or failed.
func (q *recvQueue) push(msg Message) error {
	if err := q.reserve(len(msg.Data), dataPool); err != nil {
		return err
	}
	return q.pushReserved(msg, dataPool)
}

// pushReserved queues msg, whose bytes reserve has counted already, waiting
// for a free slot. On failure the reservation is given back and the caller
// keeps ownership of msg.
func (q *recvQueue) pushReserved(msg Message, p pool) error {
	size := len(msg.Data)
	q.mu.Lock()
	for !q.closed && q.err == nil && q.n >= q.maxItems {
		q.space.Wait()
	}
	if err := q.stateErr(); err != nil {
		if !q.closed {
			q.held[p] -= size
		}
		q.mu.Unlock()
		return err
	}
	if q.n == len(q.items) {
		// Room by count (q.n < maxItems), so len(q.items) < maxItems.
		q.grow(min(2*len(q.items), q.maxItems))
	}
	q.items[(q.head+q.n)%len(q.items)] = queued{msg: msg, pool: p}
	q.n++
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
	q.held = [2]int{}
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
			q.held[it.pool] -= len(it.msg.Data)
			// Producers wait for a slot or for budget, and only one that
			// needed what was freed can go on: wake them all. They are at
			// most one per stream, and wait only while the budget is spent.
			q.space.Broadcast()
			if q.n == 0 {
				// The signals of the messages just taken would only send
				// the next pop round its loop once more (a three-way
				// select per batch): drop them. One sent after this is
				// for a message or error still to come, and stays.
				select {
				case <-q.ready:
				default:
				}
			}
			q.mu.Unlock()
			return it.msg, it.err
		}
		if q.err != nil {
			err := q.err
			q.mu.Unlock()
			return Message{}, err
		}
		q.mu.Unlock()
		if err := ctx.Err(); err != nil {
			// A poll (an ended context: what is already there, else at
			// once the context's error) needs no select.
			return Message{}, err
		}
		select {
		case <-q.ready:
		case <-q.done:
		case <-ctx.Done():
			return Message{}, ctx.Err()
		}
	}
}

package daemon

import (
	"sync"

	"github.com/m2md/m2md/internal/bufpool"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/security"
	"github.com/m2md/m2md/transport"
)

// outMsg is one message waiting in a session's send queue.
type outMsg struct {
	ch   transport.ChannelID
	buf  *[]byte // from bufpool; the writer returns it
	kind msgKind
	// format and frameOff describe a DATA message's frame: its wire form
	// and where it starts in *buf.
	format   frameFormat
	frameOff int
	// closeSent, when set, is the reason of the CLOSE this message carries:
	// the writer records it in the state machine once written.
	closeSent negotiate.CloseReason
	// closeAfter makes the writer close the connection once the message is
	// written (the acknowledgement of a received CLOSE).
	closeAfter bool
	// span is the traced request this message delivers, nil if none: the
	// writer notes on it how long the request waited in the queue.
	span *routeSpan
}

// msgKind is what a queued message is.
type msgKind uint8

const (
	// msgData: a DATA message. The writer seals its frame (M2M v1), counts
	// it, bounds its write by SlowConsumerGrace, and drops it after CLOSE.
	msgData msgKind = iota + 1
	// msgControl: PING, PONG, CLOSE or its acknowledgement; written even
	// after CLOSE, since it may be the CLOSE.
	msgControl
	// msgCancel: a CANCEL; not a frame, but like DATA never sent after
	// CLOSE.
	msgCancel
)

// frameFormat is a frame's wire form. It indexes sessionMetrics' counters,
// in the order of algorithmLabels.
type frameFormat uint8

const (
	formatM2M         frameFormat = iota // M2M v1, sealed by the writer
	formatTokenNative                    // TokenNative, sent as it is
	numFormats
)

// tailroom is the spare capacity every outgoing frame buffer carries, so the
// writer can seal any mode's frame in place.
const tailroom = security.MaxOverhead

func (m *outMsg) free() {
	bufpool.Put(m.buf)
	m.buf = nil
}

// sendQueue is a session's bounded queue of messages for its writer. It is
// a slice rather than a buffered channel so that an idle session costs no
// memory for it (a channel of 1,024 outMsg would preallocate ~48 KiB per
// session), and so that the writer can take everything pending at once.
type sendQueue struct {
	maxLen   int
	maxBytes int

	mu      sync.Mutex
	items   []outMsg
	bytes   int
	waiting chan struct{} // capacity 1: "items is not empty"
}

func newSendQueue(maxLen, maxBytes int) *sendQueue {
	return &sendQueue{maxLen: maxLen, maxBytes: maxBytes, waiting: make(chan struct{}, 1)}
}

// push adds m unless the queue is full by count or by bytes (one message is
// always accepted into an empty queue, however large). Bytes are what the
// message holds, its pooled buffer's capacity: size classes round up to a
// power of two, so a frame just over 64 KiB holds 128 KiB.
func (q *sendQueue) push(m outMsg) bool {
	n := cap(*m.buf)
	q.mu.Lock()
	if len(q.items) >= q.maxLen || (len(q.items) > 0 && q.bytes+n > q.maxBytes) {
		q.mu.Unlock()
		return false
	}
	q.items = append(q.items, m)
	q.bytes += n
	q.mu.Unlock()
	select {
	case q.waiting <- struct{}{}:
	default:
	}
	return true
}

// pushLast adds m whatever the bounds: the one CLOSE that ends a session,
// or the final error of a request cut short (endRequestWithError),
// behind the messages already queued.
func (q *sendQueue) pushLast(m outMsg) {
	q.mu.Lock()
	q.items = append(q.items, m)
	q.bytes += cap(*m.buf)
	q.mu.Unlock()
	select {
	case q.waiting <- struct{}{}:
	default:
	}
}

// takeAll moves every queued message to batch (reused by the caller) and
// empties the queue.
func (q *sendQueue) takeAll(batch []outMsg) []outMsg {
	q.mu.Lock()
	batch = append(batch, q.items...)
	clear(q.items)
	if cap(q.items) > 64 {
		q.items = nil // let a burst's backing array go
	} else {
		q.items = q.items[:0]
	}
	q.bytes = 0
	q.mu.Unlock()
	return batch
}

func (q *sendQueue) stats() (n, bytes int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items), q.bytes
}

package bench

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/m2md/m2md/security"
	"github.com/m2md/m2md/transport"
)

// wire is how a requester frames requests and reads replies for one kind
// of target: the daemon (M2M protocol) or the bare relay and echo target.
type wire interface {
	// request appends to b the message carrying p as request id on ch.
	request(b []byte, ch transport.ChannelID, id uint64, p *prepared) ([]byte, error)
	// reply reads a message received on ch. A message that is not the
	// final reply to a request (a PING, a stream chunk) has final false. An
	// error means the connection cannot go on. (The message is passed as
	// its parts: a pointer to it would make every received Message escape.)
	reply(data []byte, ch transport.ChannelID) (replyInfo, error)
	// matches reports whether a reply body is the echo of p.
	matches(body []byte, p *prepared) bool
	// close ends the connection.
	close()
	// closedByTarget reports whether the target ended the session (the
	// daemon's CLOSE), so that a send the closed connection refuses is
	// not taken for a connection that failed.
	closedByTarget() bool
}

type replyInfo struct {
	final  bool
	id     uint64
	reason string // "" for a good reply
	body   []byte // what to compare with the request (valid until Release)
}

// Request ids carry a slot index in their low bits and the slot's
// generation above, so a reply to a request that was already given up on
// (timed out) is recognised and not taken for the slot's next request.
const (
	slotBits = 24
	slotMask = 1<<slotBits - 1
)

type callSlot struct {
	busy     bool
	gen      uint64
	intended int64 // clock ns the request was due
	sentAt   int64
	payload  int
	ch       transport.ChannelID
	hasCh    bool
	out      int           // bytes of the request message
	done     chan<- string // closed loop: the waiting worker; nil in open loop
}

// requester is one connection sending requests and matching their final
// replies, with any number in flight.
type requester struct {
	conn     transport.Conn
	w        wire
	payloads []prepared
	rec      *recorder
	clk      clock
	perReq   bool        // a channel per request (QUIC)
	sendMu   *sync.Mutex // shared channel: build and send in one order
	timeout  time.Duration
	release  func() // open loop: one more request may go
	bufSize  int

	mu    sync.Mutex
	slots []callSlot
	free  []int
	// ended is the reason failAll gave, once the connection is over: a
	// request started after it fails with the same reason. Sent, it would
	// wait for a reply that cannot come; refused by the closed connection,
	// it would count as connection_lost after the daemon's CLOSE.
	ended string
	bufs  sync.Pool

	ctx     context.Context // ends at stop
	cancel  context.CancelFunc
	jobs    chan job
	sender  sync.WaitGroup
	wg      sync.WaitGroup
	stopped chan struct{}
	// chain, set while a closed loop runs, lets the reader send a worker's
	// next request itself (complete).
	chain atomic.Pointer[closedChain]
}

// closedChain is what the reader needs to go on with a closed loop's
// worker: the loop's context, its end on the clock and the payload picker.
type closedChain struct {
	ctx     context.Context
	stop    int64
	payload func() int
}

type job struct {
	intended int64
	payload  int
}

func newRequester(conn transport.Conn, w wire, sendMu *sync.Mutex, payloads []prepared, rec *recorder, clk clock, maxInFlight int, timeout time.Duration) *requester {
	size := 0
	for _, p := range payloads {
		size = max(size, len(p.frame))
	}
	r := &requester{
		conn:     conn,
		w:        w,
		payloads: payloads,
		rec:      rec,
		clk:      clk,
		perReq:   conn.Transport() == TransportQUIC,
		sendMu:   sendMu,
		timeout:  timeout,
		bufSize:  size + 512 + security.MaxOverhead,
		slots:    make([]callSlot, maxInFlight),
		free:     make([]int, 0, maxInFlight),
		stopped:  make(chan struct{}),
	}
	for i := maxInFlight - 1; i >= 0; i-- {
		r.free = append(r.free, i)
	}
	r.bufs.New = func() any { b := make([]byte, 0, r.bufSize); return &b }
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r
}

// start runs the reader and the timeout sweeper; with jobs (open loop) also
// a sender.
func (r *requester) start(openLoop bool) {
	r.wg.Go(r.readLoop)
	r.wg.Go(r.sweep)
	if openLoop {
		r.jobs = make(chan job, len(r.slots))
		r.sender.Go(func() {
			for j := range r.jobs {
				// Requests already due go out together: one Cork around
				// what the queue holds now, never a wait for more.
				r.conn.Cork()
				r.send(j.intended, j.payload, nil, noChannel)
			more:
				for range batchMax - 1 {
					select {
					case j, ok := <-r.jobs:
						if !ok {
							break more
						}
						r.send(j.intended, j.payload, nil, noChannel)
					default:
						break more
					}
				}
				_ = r.conn.Uncork()
			}
		})
	}
}

// roundTrip sends one request and waits for its end (closed loop). Every
// send ends with exactly one value on done, whatever happens. It reports
// false when the connection is gone, so that the worker stops.
func (r *requester) roundTrip(ctx context.Context, intended int64, payload int, done chan string) bool {
	r.send(intended, payload, done, noChannel)
	select {
	case reason := <-done:
		return reason != reasonConnectionLost && reason != reasonSessionClosed
	case <-ctx.Done():
		return true
	}
}

// noChannel tells send to acquire the request's channel itself.
const noChannel = ^transport.ChannelID(0)

// send sends one request, on pre if the caller has acquired its channel
// (QUIC), else on one it acquires. It reports whether the request is in
// flight; if not, its failure has been recorded.
func (r *requester) send(intended int64, payload int, done chan<- string, pre transport.ChannelID) bool {
	id, reason := r.acquire(intended, payload, done)
	if reason != "" {
		if pre != noChannel {
			r.conn.ReleaseChannel(pre)
		}
		r.rec.failure(intended, reason)
		r.wake(callSlot{done: done}, reason)
		return false
	}
	var ch transport.ChannelID
	if pre != noChannel {
		ch = pre
		r.mu.Lock()
		s := &r.slots[int(id&slotMask)-1]
		s.ch, s.hasCh = ch, true
		r.mu.Unlock()
	} else if r.perReq {
		// The context only matters when every stream the daemon allows is
		// taken; a per-request timeout would cost a timer per request.
		c, err := r.conn.AcquireChannel(r.ctx)
		if err != nil {
			r.finish(id, "no_channel", false)
			return false
		}
		ch = c
		r.mu.Lock()
		s := &r.slots[int(id&slotMask)-1]
		s.ch, s.hasCh = ch, true
		r.mu.Unlock()
	}
	bp := r.bufs.Get().(*[]byte)
	// Corked before queueing for the shared channel: a worker that finds
	// another sending joins its batch instead of following it with a
	// system call of its own.
	r.conn.Cork()
	if r.sendMu != nil {
		r.sendMu.Lock()
	}
	msg, err := r.w.request((*bp)[:0], ch, id, &r.payloads[payload])
	if err == nil {
		r.setOut(id, len(msg))
		// A context that cannot end costs the transport nothing per
		// Send; Close unblocks a stuck one.
		err = r.conn.Send(context.Background(), ch, msg)
	}
	if r.sendMu != nil {
		r.sendMu.Unlock()
	}
	if uerr := r.conn.Uncork(); err == nil {
		err = uerr
	}
	*bp = msg[:0]
	if cap(*bp) >= r.bufSize {
		r.bufs.Put(bp)
	}
	if err != nil {
		reason := "send_failed"
		switch {
		case errors.Is(err, transport.ErrClosed) && r.w.closedByTarget():
			// The daemon sent CLOSE and, acknowledged, ended the
			// connection before the reader got to failAll.
			reason = reasonSessionClosed
		case errors.Is(err, transport.ErrClosed):
			reason = reasonConnectionLost
		}
		r.finish(id, reason, false)
		return false
	}
	return true
}

// acquire takes a slot for a request, or returns why there is none.
func (r *requester) acquire(intended int64, payload int, done chan<- string) (uint64, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended != "" {
		return 0, r.ended
	}
	n := len(r.free)
	if n == 0 {
		return 0, "generator_in_flight_limit"
	}
	idx := r.free[n-1]
	r.free = r.free[:n-1]
	s := &r.slots[idx]
	s.gen++
	s.busy = true
	s.intended = intended
	s.sentAt = r.clk.now()
	s.payload = payload
	s.hasCh = false
	s.out = 0
	s.done = done
	return s.gen<<slotBits | uint64(idx+1), ""
}

func (r *requester) setOut(id uint64, n int) {
	r.mu.Lock()
	if s, ok := r.slot(id); ok {
		s.out = n
	}
	r.mu.Unlock()
}

// slot finds the busy slot of id; r.mu is held.
func (r *requester) slot(id uint64) (*callSlot, bool) {
	idx := int(id&slotMask) - 1
	if idx < 0 || idx >= len(r.slots) {
		return nil, false
	}
	s := &r.slots[idx]
	if !s.busy || s.gen != id>>slotBits {
		return nil, false
	}
	return s, true
}

// take frees the slot of id and returns what it held.
func (r *requester) take(id uint64) (callSlot, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.slot(id)
	if !ok {
		return callSlot{}, false
	}
	c := *s
	s.busy = false
	s.done = nil
	r.free = append(r.free, int(id&slotMask)-1)
	return c, true
}

// finish ends request id without a good reply.
func (r *requester) finish(id uint64, reason string, releaseCh bool) {
	c, ok := r.take(id)
	if !ok {
		return
	}
	if releaseCh && c.hasCh {
		r.conn.ReleaseChannel(c.ch)
	}
	r.rec.failure(c.intended, reason)
	r.wake(c, reason)
}

func (r *requester) wake(c callSlot, reason string) {
	if c.done != nil {
		c.done <- reason
	}
	r.releaseOne()
}

func (r *requester) releaseOne() {
	if r.release != nil {
		r.release()
	}
}

func (r *requester) readLoop() {
	var bad error // a reply the connection cannot go on after
	_ = receiveBatches(context.Background(), r.conn, func(msg transport.Message) error {
		defer msg.Release()
		info, err := r.w.reply(msg.Data, msg.Channel)
		if err != nil {
			bad = err
			return err
		}
		if info.final {
			r.complete(info, len(msg.Data))
		}
		return nil
	})
	if errors.Is(bad, errSessionClosed) {
		r.failAll(reasonSessionClosed)
	} else {
		r.failAll(reasonConnectionLost)
	}
	if bad != nil {
		r.w.close()
	}
}

func (r *requester) complete(info replyInfo, in int) {
	now := r.clk.now()
	c, ok := r.take(info.id)
	if !ok {
		r.rec.lateReply()
		return
	}
	reason := info.reason
	if reason == "" && !r.w.matches(info.body, &r.payloads[c.payload]) {
		reason = "corrupt_reply"
	}
	if c.hasCh {
		r.conn.ReleaseChannel(c.ch)
	}
	if reason == "" {
		r.rec.success(c.intended, c.sentAt, now, c.out, in)
		if r.sendNext(c.done, now) {
			return
		}
	} else {
		r.rec.failure(c.intended, reason)
	}
	r.wake(c, reason)
}

// sendNext sends, from the reader, the next request of the closed loop's
// worker waiting on done, as the worker would once woken, and reports
// whether it did. The reader answers everything already received inside
// one Cork (receiveBatches), so the next requests of all the workers
// whose replies came together leave in one system call, and no worker
// goroutine is woken per round trip. The request takes over done: the
// worker wakes when a request of its chain fails or the loop is over.
// Where the worker would wait (for the loop's end, or for a QUIC stream
// when the daemon's limit is reached) the worker is woken instead, as the
// reader must never wait.
func (r *requester) sendNext(done chan<- string, now int64) bool {
	ch := r.chain.Load()
	if ch == nil || done == nil || now >= ch.stop || ch.ctx.Err() != nil {
		return false
	}
	pre := noChannel
	if r.perReq {
		c, err := r.conn.AcquireChannel(polled)
		if err != nil {
			return false
		}
		pre = c
	}
	r.send(now, ch.payload(), done, pre)
	return true
}

// sweep gives up on requests without a final reply after the timeout. Their
// channel is not reused: a late reply may still come on it.
func (r *requester) sweep() {
	every := min(max(r.timeout/4, 10*time.Millisecond), 100*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	var expired []uint64
	for {
		select {
		case <-r.stopped:
			return
		case <-t.C:
		}
		now := r.clk.now()
		expired = expired[:0]
		r.mu.Lock()
		for i := range r.slots {
			s := &r.slots[i]
			if s.busy && time.Duration(now-s.sentAt) > r.timeout {
				expired = append(expired, s.gen<<slotBits|uint64(i+1))
			}
		}
		r.mu.Unlock()
		for _, id := range expired {
			r.finish(id, "timeout", false)
		}
	}
}

// failAll ends every request in flight, and every later one, with reason
// (the first reason given stays).
func (r *requester) failAll(reason string) {
	var ids []uint64
	r.mu.Lock()
	if r.ended == "" {
		r.ended = reason
	}
	for i := range r.slots {
		if s := &r.slots[i]; s.busy {
			ids = append(ids, s.gen<<slotBits|uint64(i+1))
		}
	}
	r.mu.Unlock()
	for _, id := range ids {
		r.finish(id, reason, false)
	}
}

// inFlight counts the requests waiting for their final reply.
func (r *requester) inFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.slots) - len(r.free)
}

// stop ends the requester: requests still in flight fail with reason, the
// connection closes and every goroutine exits.
func (r *requester) stop(reason string) {
	r.cancel()
	if r.jobs != nil {
		close(r.jobs)
		r.sender.Wait()
	}
	close(r.stopped)
	r.failAll(reason)
	r.w.close()
	r.wg.Wait()
}

package daemon

import (
	"context"
	"errors"
	"time"

	"github.com/m2md/m2md/internal/bufpool"
	"github.com/m2md/m2md/negotiate"
)

// The writer: one goroutine at a time drains the session's control and data
// queues (control first), stamps and protects frames with the session's send
// key, and runs the state machine's timers (keepalive, CLOSE ack). It runs
// only while there is work and returns its goroutine to the daemon's pool
// (writerpool.go) when there is none, so an idle session costs no goroutine
// for it (a parked writer's stack would be about a third of an idle
// WebSocket session's memory); kick starts it again.

// kick makes sure a writer runs: called after anything is queued and when
// the state machine's timer fires.
func (se *session) kick() {
	if !se.writing.CompareAndSwap(false, true) {
		return // the running writer will see the new work
	}
	se.wmu.Lock()
	if se.wstopped {
		se.wmu.Unlock()
		se.writing.Store(false)
		return
	}
	se.writers.Add(1)
	se.wmu.Unlock()
	se.srv.pool.start(se)
}

// stopWriter waits for the running writer, if any, and keeps new ones from
// starting (teardown).
func (se *session) stopWriter() {
	se.wmu.Lock()
	se.wstopped = true
	se.wmu.Unlock()
	se.writers.Wait()
	// Only now: a writer still running may have rearmed the timer, and an
	// armed timer holds the session, its connection and (QUIC) quic-go's
	// whole connection state until it fires, up to an hour later. That
	// kept every departed QUIC session of the soak alive.
	se.timer.Stop()
	se.stall.Stop()
}

func (se *session) drain() {
	defer se.writers.Done()
	for {
		if se.ctx.Err() != nil {
			se.writing.Store(false)
			return
		}
		se.drainOnce()
		se.writing.Store(false)
		// Work queued after drainOnce looked, but before writing was
		// cleared, found a writer running and did not start one: look again.
		if !se.hasWork() || !se.writing.CompareAndSwap(false, true) {
			return
		}
	}
}

func (se *session) hasWork() bool {
	return len(se.ctrl) > 0 || len(se.queue.waiting) > 0 || se.tickDue.Load()
}

// drainOnce writes everything pending and runs the timer if it is due.
//
// What one pass writes is one batch for the transport: it holds the
// messages (Cork) and writes them with one system call at the end of the
// pass (Uncork), where a write per message would cost most of the
// daemon's CPU under load. Nothing waits for more work to arrive: a pass
// writes what is queued when it looks, so a lone message leaves at once,
// and what arrives during the batch's write is the next pass's batch.
func (se *session) drainOnce() {
	se.conn.Cork()
	defer se.uncork()
	if se.tickDue.Swap(false) {
		se.tick()
		se.rearm()
	}
	if se.writePendingControl() {
		se.rearm()
	}
	select {
	case <-se.queue.waiting:
	default:
		return
	}
	se.batch = se.queue.takeAll(se.batch[:0])
	se.slowSince.Store(0) // the queue had room again
	// One watch for the whole batch, up to the end of its write in
	// uncork: a Send inside the batch blocks only when the held bytes
	// pass the cork's limit, and the watch covers that as it covers the
	// final write. Arming and stopping the timer around each frame cost
	// two timer-heap operations per frame for nothing.
	se.watchWrite()
	for i, m := range se.batch {
		// Control messages (a CLOSE, a PONG) overtake a long batch.
		if se.writePendingControl() {
			se.rearm()
		}
		se.write(m)
		se.batch[i] = outMsg{}
	}
	if cap(se.batch) > 64 {
		se.batch = nil // let a burst's backing array go
	}
}

// uncork writes the pass's batch. That write is where a peer that does not
// read now blocks the writer, so the stall timer watches it as it watches
// a single write. An error means the connection is gone, which its reader
// reports; the frames were counted as written, as a frame the kernel took
// but the peer never read would be.
func (se *session) uncork() {
	if !se.batchWrote {
		_ = se.conn.Uncork() // nothing held: returns at once
		if se.stallArmed.Load() {
			se.unwatchWrite() // every frame of the batch was dropped
		}
		return
	}
	se.batchWrote = false
	se.m.writeBatches.Inc()
	for f := range numFormats {
		if se.outFrames[f] > 0 {
			se.m.framesOut[f].Add(float64(se.outFrames[f]))
			se.m.bytesOut[f].Add(float64(se.outBytes[f]))
			se.outFrames[f], se.outBytes[f] = 0, 0
		}
	}
	if !se.stallArmed.Load() {
		se.watchWrite() // a batch of control messages only
	}
	_ = se.conn.Uncork()
	se.unwatchWrite()
	if se.closeInBatch {
		// Only now has the CLOSE left, behind the batch's replies (which
		// may be megabytes a slow reader takes seconds to accept): the
		// acknowledgement is awaited from here, and the backstop ends the
		// connection if the state machine's timer cannot.
		se.closeInBatch = false
		se.mu.Lock()
		se.machine.CloseLeft(time.Now())
		se.mu.Unlock()
		se.rearm()
		time.AfterFunc(se.srv.cfg.CloseTimeout+time.Second, func() { se.conn.Close() })
	}
}

// timerFired runs when the state machine's deadline may have come.
func (se *session) timerFired() {
	se.tickDue.Store(true)
	se.kick()
}

// rearm sets the timer to the state machine's next deadline.
func (se *session) rearm() {
	se.mu.Lock()
	d := se.machine.Deadline()
	se.mu.Unlock()
	if d.IsZero() {
		d = time.Now().Add(time.Hour)
	}
	se.timer.Reset(time.Until(d))
}

// writePendingControl writes the queued control messages and reports
// whether there were any.
func (se *session) writePendingControl() bool {
	wrote := false
	for {
		select {
		case m := <-se.ctrl:
			se.write(m)
			wrote = true
		default:
			return wrote
		}
	}
}

func (se *session) tick() {
	now := time.Now()
	se.mu.Lock()
	act := se.machine.Tick(now)
	reason := se.machine.CloseReason()
	se.mu.Unlock()
	switch act {
	case negotiate.ActionPing:
		se.writeControl(negotiate.AppendPing(nil, se.neg.ID, now))
	case negotiate.ActionClose:
		se.closing.Store(true)
		se.setReason(reason)
		se.log.Info().Str("reason", string(reason)).Msg("closing idle session")
		se.closeWritten.Store(true)
		se.writeControl(negotiate.AppendClose(nil, se.neg.ID, now, reason, "no answer to PING"))
		// The machine waits the protocol's 5 s for the acknowledgement;
		// Config.CloseTimeout may be shorter, as it is for every other CLOSE.
		time.AfterFunc(se.srv.cfg.CloseTimeout, func() { se.conn.Close() })
	case negotiate.ActionDisconnect:
		se.conn.Close()
	}
}

func (se *session) writeControl(b []byte) {
	ctx, cancel := context.WithTimeout(se.ctx, se.srv.cfg.CloseTimeout)
	defer cancel()
	_ = se.conn.Send(ctx, 0, b)
	se.batchWrote = true
}

// write sends one queued message. A frame gets the channel's next sequence
// number in its reserved bytes and, in hmac/aead mode, the receiver's
// protection, in place (the buffer carries tailroom for the tag).
func (se *session) write(m outMsg) {
	defer m.free()
	if m.kind != msgControl && se.closeWritten.Load() {
		// After CLOSE a side sends nothing else (docs/protocol.md §3.5).
		se.srv.metrics.queueDrops.WithLabelValues("after_close").Inc()
		return
	}
	if m.kind == msgData && m.format == formatM2M {
		fr, err := se.send.Seal(uint32(m.ch), (*m.buf)[m.frameOff:])
		if err != nil {
			reason := "protect_failed"
			if errors.Is(err, negotiate.ErrTooManyChannels) {
				reason = "too_many_channels"
			} else {
				se.log.Error().Err(err).Msg("protecting a frame failed")
			}
			se.srv.metrics.queueDrops.WithLabelValues(reason).Inc()
			return
		}
		*m.buf = (*m.buf)[:m.frameOff+len(fr)]
	}
	if m.kind == msgData && m.format == formatTokenNative && se.send.Protected() {
		// Sealed into a new buffer: the envelope's head goes before the
		// frame (docs/protocol.md §4.2). Only sessions with tn_sealed get
		// here (takesTokenNative).
		old := m.buf
		hdr, tn := (*old)[:m.frameOff], (*old)[m.frameOff:]
		p := bufpool.Get(len(*old) + negotiate.SealedTNOverhead(se.neg.Params.SecurityMode))
		out, err := se.send.SealTokenNative(append((*p)[:0], hdr...), uint32(m.ch), hdr, tn)
		bufpool.Put(old)
		m.buf = p
		if err != nil {
			reason := "protect_failed"
			if errors.Is(err, negotiate.ErrTooManyChannels) {
				reason = "too_many_channels"
			} else {
				se.log.Error().Err(err).Msg("sealing a TokenNative frame failed")
			}
			se.srv.metrics.queueDrops.WithLabelValues(reason).Inc()
			return
		}
		*p = out
	}
	if m.closeSent != "" {
		se.mu.Lock()
		_ = se.machine.CloseSent(m.closeSent, time.Now())
		se.mu.Unlock()
		se.closeInBatch = true // uncork arms the backstop
	}
	// Data is written without a cancellable context: coder/websocket (and
	// the QUIC transport) register a context.AfterFunc per write for one,
	// which would be most of the daemon's allocations per frame. A write stuck
	// on a peer that does not read is ended by closing the connection, which
	// every way out of a session does (teardown, slow-consumer close,
	// shutdown).
	ctx := context.Background()
	if m.closeSent != "" || m.closeAfter {
		// The session context may already be cancelled by a shutdown; the
		// CLOSE still deserves its chance to go out.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(se.ctx), se.srv.cfg.CloseTimeout)
		defer cancel()
	}
	if hook := se.srv.cfg.beforeCloseWrite; hook != nil && (m.closeSent != "" || m.closeAfter) {
		hook()
	}
	err := se.conn.Send(ctx, m.ch, *m.buf) // watched by the batch's stall timer (drainOnce)
	if m.closeSent != "" || m.closeAfter {
		// Set only once the CLOSE is in the transport's hands (or failed),
		// not before the Send: awaitCloseWritten lets teardown close the
		// connection as soon as this is set, and a Close that came first
		// made the Send refuse the CLOSE, so the peer saw its connection
		// end without being told why.
		se.closeWritten.Store(true)
	}
	se.batchWrote = true
	if err != nil {
		if m.kind == msgData {
			se.srv.metrics.queueDrops.WithLabelValues("send_failed").Inc()
		}
		return
	}
	if m.kind == msgData {
		se.outFrames[m.format]++
		se.outBytes[m.format] += len(*m.buf)
	}
	if m.span != nil {
		m.span.written()
	}
	if m.closeAfter {
		se.conn.Close()
	}
}

// watchWrite arms the stall timer for a write that may block on the peer;
// unwatchWrite disarms it when the write returns. Only the writer calls
// them.
func (se *session) watchWrite() {
	se.stallMark.Store(se.bytesWritten())
	se.stallArmed.Store(true)
	se.stall.Reset(se.srv.cfg.SlowConsumerGrace)
}

func (se *session) unwatchWrite() {
	se.stallArmed.Store(false)
	se.stall.Stop()
}

func (se *session) bytesWritten() uint64 {
	if se.progress == nil {
		return 0
	}
	return se.progress.BytesWritten()
}

func (se *session) bytesRead() uint64 {
	if se.received == nil {
		return 0
	}
	return se.received.BytesRead()
}

// writeStalled runs when a DATA write has been blocked for
// SlowConsumerGrace. If the connection took bytes meanwhile, the peer is
// reading, only slowly (a large message, or a flow-control window that
// opens in steps): the watch goes on for another grace. If it took none,
// the peer has stopped reading. Nothing else would notice: the queue need
// not fill (nobody may send the session more), and the keepalive, PINGs and
// session timeout run in this very writer, which is stuck. Close the
// session like any slow consumer; closing the connection unblocks the
// write.
func (se *session) writeStalled() {
	if !se.stallArmed.Load() {
		return // the write returned as the timer fired
	}
	if n := se.bytesWritten(); n != se.stallMark.Load() {
		se.stallMark.Store(n)
		se.stall.Reset(se.srv.cfg.SlowConsumerGrace)
		return
	}
	se.log.Warn().Dur("for", se.srv.cfg.SlowConsumerGrace).Msg("closing slow consumer: a write is blocked")
	se.srv.metrics.queueDrops.WithLabelValues("slow_consumer_closed").Inc()
	se.initiateClose(negotiate.ReasonError, "slow consumer: not reading")
	se.conn.Close()
}

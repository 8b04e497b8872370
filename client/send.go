package client

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/bufpool"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// frameSlack is room for a frame's headers beyond its JSON (the routing or
// response header is at most a few hundred bytes) and for the HMAC tag or
// AEAD nonce and tag, so that a pooled buffer is rarely outgrown.
const frameSlack = 640

// outgoing is a DATA message being built in a pooled buffer: the header at
// [0:hdrLen], the frame after it.
type outgoing struct {
	buf    *[]byte
	hdrLen int
}

func newOutgoing(flags negotiate.DataFlags, id uint64, peer string, sizeHint int) (outgoing, error) {
	return newTracedOutgoing(flags, id, peer, nil, sizeHint)
}

// newTracedOutgoing is newOutgoing for a request with a trace block (nil:
// none, docs/protocol.md §4.8).
func newTracedOutgoing(flags negotiate.DataFlags, id uint64, peer string, trace []byte, sizeHint int) (outgoing, error) {
	buf := bufpool.Get(negotiate.MaxDataHeaderLen + len(trace) + sizeHint + frameSlack)
	b, err := negotiate.AppendTracedDataHeader((*buf)[:0], flags, id, peer, trace)
	if err != nil {
		bufpool.Put(buf)
		return outgoing{}, fmt.Errorf("client: %w", err)
	}
	*buf = b
	return outgoing{buf: buf, hdrLen: len(b)}, nil
}

func (o outgoing) free() { bufpool.Put(o.buf) }

// encodeJSON appends the frame carrying json (schema chosen from the JSON,
// or SchemaError when errorFrame).
func (o outgoing) encodeJSON(json []byte, lim frame.Limits) error {
	b, err := frame.AppendEncode(*o.buf, json, lim)
	if err != nil {
		if errors.Is(err, frame.ErrLimit) {
			return fmt.Errorf("%w: %w", ErrTooLarge, err)
		}
		return fmt.Errorf("client: encode: %w", err)
	}
	*o.buf = b
	return nil
}

// sendMessage seals and writes an outgoing DATA message on ch. An M2M v1
// frame is sealed in place (the tag or nonce goes into the buffer's spare
// room); other frames (TokenNative) go as they are.
//
// The frame is written without the caller's context: once a sequence
// number is taken the frame must reach the wire, or the channel's numbering
// would have a hole the daemon refuses as a replay. What unblocks a Send
// stuck on a dead peer is the end of the session, which closes the
// connection (a context that can be cancelled would also cost the
// transports an AfterFunc registration per message).
//
// The caller corks the connection before queueing for the channel, so a
// sender that finds another one sending joins its batch (one system call
// for both on WebSocket) instead of following it with its own; the last
// to finish writes the batch. Nothing waits for senders to come.
func (s *session) sendMessage(ch transport.ChannelID, o outgoing) error {
	s.conn.Cork()
	err := s.sendCorked(ch, o)
	if uerr := s.conn.Uncork(); uerr != nil && err == nil {
		err = s.sendFailed(uerr)
	}
	return err
}

func (s *session) sendCorked(ch transport.ChannelID, o outgoing) error {
	fr := (*o.buf)[o.hdrLen:]
	m2m := isM2M(fr)
	// A TokenNative frame in a protected session travels sealed, when the
	// session has tn_sealed (docs/protocol.md §4.2); without it the daemon
	// refuses it, as it would anything unprotected.
	sealTN := !m2m && s.send.Protected() && s.info.Params.Has(negotiate.FeatureTNSealed)
	size := len(fr)
	switch {
	case m2m:
		size += s.send.Overhead()
	case sealTN:
		size += negotiate.SealedTNOverhead(s.mode)
	}
	if size > s.maxPayload {
		return fmt.Errorf("%w: frame of %d bytes exceeds the negotiated max_payload %d", ErrTooLarge, size, s.maxPayload)
	}
	chs, err := s.channel(ch)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	chs.mu.Lock()
	defer chs.mu.Unlock()
	if s.closing.Load() {
		return s.sendErr()
	}
	if m2m {
		if n := s.send.Overhead(); cap(fr)-len(fr) < n {
			*o.buf = slices.Grow(*o.buf, n)
			fr = (*o.buf)[o.hdrLen:]
		}
		p, err := s.send.Seal(uint32(ch), fr)
		if err != nil {
			// Only a malformed frame from SendFrame gets here; no number
			// was taken.
			return fmt.Errorf("client: %w", err)
		}
		*o.buf = (*o.buf)[:o.hdrLen+len(p)]
	}
	if sealTN {
		hdr := (*o.buf)[:o.hdrLen]
		b, err := s.send.SealTokenNative(make([]byte, 0, size+o.hdrLen), uint32(ch), hdr, fr)
		if err != nil {
			return fmt.Errorf("client: %w", err)
		}
		*o.buf = append(append((*o.buf)[:0], hdr...), b...)
	}
	msg := *o.buf
	if err := s.conn.Send(context.Background(), ch, msg); err != nil {
		return s.sendFailed(err)
	}
	st := &s.c.stats
	st.framesSent.Add(1)
	st.wireSent.Add(uint64(len(msg)))
	return nil
}

// sendFailed turns a transport's write error into the error a caller sees.
func (s *session) sendFailed(err error) error {
	if s.ctx.Err() != nil {
		return s.sendErr()
	}
	if errors.Is(err, transport.ErrClosed) {
		// The reader will notice too and end the session.
		return lostError(fmt.Errorf("client: send: %w", err))
	}
	return fmt.Errorf("client: send: %w", err)
}

// sendJSON sends json as one DATA message.
func (s *session) sendJSON(ch transport.ChannelID, flags negotiate.DataFlags, id uint64, json []byte) error {
	o, err := newOutgoing(flags, id, "", len(json))
	if err != nil {
		return err
	}
	defer o.free()
	if err := o.encodeJSON(json, s.encLim); err != nil {
		return err
	}
	if err := s.sendMessage(ch, o); err != nil {
		return err
	}
	s.c.stats.jsonSent.Add(uint64(len(json)))
	return nil
}

// sendHeaders sends a headers reply: a REPLY whose frame is schema 03
// marked as one (docs/protocol.md §4.7).
func (s *session) sendHeaders(ch transport.ChannelID, id uint64, json []byte) error {
	o, err := newOutgoing(negotiate.FlagReply, id, "", len(json))
	if err != nil {
		return err
	}
	defer o.free()
	b, err := frame.AppendEncodeHeadersReply(*o.buf, json, s.encLim)
	if err != nil {
		return fmt.Errorf("client: encode headers: %w", err)
	}
	*o.buf = b
	if err := s.sendMessage(ch, o); err != nil {
		return err
	}
	s.c.stats.jsonSent.Add(uint64(len(json)))
	return nil
}

// sendBatch sends stream chunks as one batch reply (REPLY|BATCH, schema
// 03 whose JSON is negotiate.AppendBatch's array; size its length).
// maxBatchCheck is how many chunks sendBatch checks without allocating.
const maxBatchCheck = 64

func (s *session) sendBatch(ch transport.ChannelID, id uint64, jsons [][]byte, size int) error {
	o, err := newOutgoing(negotiate.FlagReply|negotiate.FlagBatch, id, "", size)
	if err != nil {
		return err
	}
	defer o.free()
	ab := bufpool.Get(size)
	defer bufpool.Put(ab)
	arr := negotiate.AppendBatch((*ab)[:0], jsons)
	b, err := frame.AppendEncodeSchema(*o.buf, arr, frame.SchemaStream, s.encLim)
	if err != nil {
		if errors.Is(err, frame.ErrLimit) {
			return fmt.Errorf("%w: %w", ErrTooLarge, err)
		}
		return fmt.Errorf("client: encode: %w", err)
	}
	// The array is JSON (the encoder checked it); it splits into as many
	// chunks as were joined only if each is one JSON value ("1,2" would
	// come out as two).
	var room [maxBatchCheck][]byte // no allocation for a batch of up to 64 chunks
	if parts, err := negotiate.SplitBatch(room[:0], arr); err != nil || len(parts) != len(jsons) {
		return fmt.Errorf("client: encode: a chunk of the batch is not one JSON value")
	}
	*o.buf = b
	if err := s.sendMessage(ch, o); err != nil {
		return err
	}
	s.c.stats.jsonSent.Add(uint64(size - len(jsons) - 1))
	return nil
}

// sendError sends an error reply (REPLY|END, schema 0x10) to request id.
func (s *session) sendError(ch transport.ChannelID, id uint64, code negotiate.ErrorCode, text string) error {
	o, err := newOutgoing(negotiate.FlagReply|negotiate.FlagEnd, id, "", len(code)+len(text)+64)
	if err != nil {
		return err
	}
	defer o.free()
	b, err := frame.AppendErrorFrame(*o.buf, string(code), text)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	*o.buf = b
	return s.sendMessage(ch, o)
}

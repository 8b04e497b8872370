package bench

import (
	"bytes"
	"crypto/rand"
	"errors"
	"sync/atomic"

	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// m2mWire is a requester's side of the M2M protocol.
type m2mWire struct {
	s *m2mSession
	// providers are the agent ids requests without a routing model are
	// addressed to, in turn.
	providers []string
	next      atomic.Uint64
	// traced gives every request a sampled trace context of its own
	// (LoadConfig.Traced).
	traced bool
}

// newTrace is a trace block naming a new trace, sampled, as a requester
// whose every request is a root span would send.
func newTrace(b []byte) []byte {
	var t negotiate.Trace
	for t.TraceID == ([negotiate.TraceIDLen]byte{}) || t.SpanID == ([negotiate.SpanIDLen]byte{}) {
		rand.Read(t.TraceID[:])
		rand.Read(t.SpanID[:])
	}
	t.Flags = 1 // sampled
	b, _ = negotiate.AppendTrace(b, &t)
	return b
}

func (w *m2mWire) request(b []byte, ch transport.ChannelID, id uint64, p *prepared) ([]byte, error) {
	peer := ""
	if p.model == "" && len(w.providers) > 0 {
		peer = w.providers[w.next.Add(1)%uint64(len(w.providers))]
	}
	var err error
	if w.traced {
		var tb [negotiate.TraceIDLen + negotiate.SpanIDLen + 2]byte
		b, err = negotiate.AppendTracedDataHeader(b, 0, id, peer, newTrace(tb[:0]))
	} else {
		b, err = negotiate.AppendDataHeader(b, 0, id, peer)
	}
	if err != nil {
		return nil, err
	}
	off := len(b)
	b = append(b, p.frame...)
	if p.tokenNative {
		return b, nil
	}
	return w.s.protect(b, off, ch)
}

func (w *m2mWire) reply(data []byte, ch transport.ChannelID) (replyInfo, error) {
	kind, err := negotiate.MessageKind(data)
	if err != nil {
		return replyInfo{}, err
	}
	if kind == negotiate.KindControl {
		return replyInfo{}, w.s.control(data)
	}
	dh, fr, err := negotiate.ParseData(data)
	if err != nil {
		return replyInfo{}, err
	}
	if !dh.IsReply() || dh.IsNotice() || !dh.IsEnd() {
		// Requests to a pure requester, notices about replies it never
		// sent, stream chunks (the echo providers send none): not the end
		// of anything this requester waits for.
		return replyInfo{}, nil
	}
	info := replyInfo{final: true, id: dh.RequestID}
	if len(fr) > 0 && fr[0] == '#' {
		plain, reason := w.s.open(fr, ch)
		if reason != "" {
			info.reason = reason
			return info, nil
		}
		if isErrorFrame(plain) {
			info.reason = errorCode(plain)
			return info, nil
		}
		fr = plain
	}
	info.body = fr
	return info, nil
}

func (w *m2mWire) matches(body []byte, p *prepared) bool {
	return sameFrame(body, p.frame, p.tokenNative)
}

func (w *m2mWire) close() { w.s.close() }

func (w *m2mWire) closedByTarget() bool { return w.s.byDaemon.Load() }

// tagWire is the framing of the bare relay and the echo target: an 8-byte
// tag, then the payload, which nobody reads.
type tagWire struct {
	conn transport.Conn
}

// errShortMessage: a relay message without its tag.
var errShortMessage = errors.New("bench: relay message shorter than its tag")

func (w *tagWire) request(b []byte, _ transport.ChannelID, id uint64, p *prepared) ([]byte, error) {
	b = append(b, make([]byte, tagLen)...)
	putTag(b[len(b)-tagLen:], id)
	return append(b, p.frame...), nil
}

func (w *tagWire) reply(data []byte, _ transport.ChannelID) (replyInfo, error) {
	if len(data) < tagLen {
		return replyInfo{}, errShortMessage
	}
	info := replyInfo{final: true, id: readTag(data), body: data[tagLen:]}
	if len(info.body) == 0 {
		info.reason = "relay_error"
	}
	return info, nil
}

func (w *tagWire) matches(body []byte, p *prepared) bool { return bytes.Equal(body, p.frame) }

func (w *tagWire) close() { w.conn.Close() }

// closedByTarget: the relay and the echo target have no session to close.
func (w *tagWire) closedByTarget() bool { return false }

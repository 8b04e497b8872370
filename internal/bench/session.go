package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// m2mSession is one agent session with a daemon, spoken directly with the
// protocol's building blocks (transport, negotiate, security, frame) so
// that the generator pays for what the protocol demands of an agent,
// framing, sequence numbers, frame protection, and nothing more: frames are
// encoded once before the run, and echoed, not decoded.
type m2mSession struct {
	conn       transport.Conn
	sess       *negotiate.Session
	send, recv *negotiate.Sealer
	shared     bool // one channel for everything (WebSocket; QUIC with shared_stream)

	// sendMu keeps "number the frame, protect it, send it" in one order
	// per channel where channels are shared; on QUIC without
	// shared_stream a channel carries one request at a time, so the order
	// is given.
	sendMu sync.Mutex
	ctrlMu sync.Mutex
	closed bool
	// byDaemon: the daemon sent CLOSE. Set before the acknowledgement
	// goes, after which the daemon ends the connection.
	byDaemon atomic.Bool
}

// dialM2M connects to ep and completes the handshake.
func dialM2M(ctx context.Context, ep endpoint, cc negotiate.ClientConfig) (*m2mSession, error) {
	conn, err := ep.dial(ctx, transport.Config{})
	if err != nil {
		return nil, err
	}
	s, err := handshake(ctx, conn, cc)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return s, nil
}

func handshake(ctx context.Context, conn transport.Conn, cc negotiate.ClientConfig) (*m2mSession, error) {
	// The stream design of the Go client (docs/protocol.md §1).
	cc.Features = append(slices.Clip(cc.Features), negotiate.FeatureSharedStream)
	hs, err := negotiate.NewHello(cc, time.Now())
	if err != nil {
		return nil, err
	}
	defer hs.Close()
	if err := conn.Send(ctx, transport.ControlChannel, hs.Message()); err != nil {
		return nil, fmt.Errorf("bench: send HELLO: %w", err)
	}
	msg, err := conn.Receive(ctx)
	if err != nil {
		return nil, fmt.Errorf("bench: no ACCEPT: %w", err)
	}
	sess, err := hs.Accept(msg.Data)
	msg.Release()
	if err != nil {
		return nil, fmt.Errorf("bench: handshake: %w", err)
	}
	s := &m2mSession{
		conn:   conn,
		sess:   sess,
		shared: conn.Transport() != TransportQUIC || sess.Params.Has(negotiate.FeatureSharedStream),
	}
	if sess.Params.Has(negotiate.FeatureSharedStream) {
		transport.ShareDataChannel(conn)
	}
	if s.send, s.recv, err = sess.Sealers(0); err != nil {
		return nil, err
	}
	sess.Wipe()
	conn.SetReadLimit(int64(sess.Params.MaxPayload) + 512)
	return s, nil
}

// protect seals the plain frame at b[off:] for channel ch, in place (b
// has security.MaxOverhead spare capacity). It returns the message,
// extended by the tag.
func (s *m2mSession) protect(b []byte, off int, ch transport.ChannelID) ([]byte, error) {
	fr, err := s.send.Seal(uint32(ch), b[off:])
	if err != nil {
		return nil, err
	}
	return b[:off+len(fr)], nil
}

// open opens a received M2M v1 frame in place and checks its sequence
// number; reason is the error code of what was wrong.
func (s *m2mSession) open(fr []byte, ch transport.ChannelID) ([]byte, string) {
	plain, err := s.recv.Open(uint32(ch), fr)
	if err != nil {
		return nil, string(negotiate.RefusalCode(err))
	}
	return plain, ""
}

// errSessionClosed ends a reader: the daemon sent CLOSE.
var errSessionClosed = errors.New("bench: daemon closed the session")

// control answers a CONTROL message: PONG for PING, the acknowledgement
// for CLOSE (after which the session is over).
func (s *m2mSession) control(data []byte) error {
	cm, err := negotiate.ParseControl(data)
	if err != nil {
		return fmt.Errorf("bench: bad control message: %w", err)
	}
	switch cm.Type {
	case negotiate.TypePing:
		s.sendControl(negotiate.AppendPong(nil, s.sess.ID, time.Now()))
	case negotiate.TypeClose:
		reason := negotiate.ReasonNormal
		if cm.Close != nil && cm.Close.Reason != "" {
			reason = cm.Close.Reason
		}
		s.byDaemon.Store(true)
		s.ctrlMu.Lock()
		already := s.closed
		s.closed = true
		s.ctrlMu.Unlock()
		if !already {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = s.conn.Send(ctx, transport.ControlChannel, negotiate.AppendClose(nil, s.sess.ID, time.Now(), reason, "acknowledged"))
			cancel()
		}
		return fmt.Errorf("%w (%s)", errSessionClosed, reason)
	}
	return nil
}

func (s *m2mSession) sendControl(b []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = s.conn.Send(ctx, transport.ControlChannel, b)
}

// close ends the session politely: CLOSE CLIENT_SHUTDOWN, then the
// connection (the transport lets the daemon read what was sent first).
func (s *m2mSession) close() {
	s.ctrlMu.Lock()
	already := s.closed
	s.closed = true
	s.ctrlMu.Unlock()
	if !already {
		s.sendControl(negotiate.AppendClose(nil, s.sess.ID, time.Now(), negotiate.ReasonClientShutdown, "bench done"))
	}
	s.conn.Close()
}

// errorCode reads the code of an error frame's body; "error" when it has
// none.
func errorCode(fr []byte) string {
	body, err := frame.AppendDecode(nil, fr, frame.Limits{})
	if err != nil {
		return "bad_error_frame"
	}
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || e.Error.Code == "" {
		return "error"
	}
	return e.Error.Code
}

// isErrorFrame reports whether a plain M2M v1 frame is an error (schema 10).
func isErrorFrame(fr []byte) bool {
	return len(fr) > frame.OffSchema && frame.Schema(fr[frame.OffSchema]) == frame.SchemaError
}

package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/quic-go/quic-go"
)

// Flow-control windows. A stream may grow its window to a whole maximum
// message so one 16 MiB message is never stalled waiting for window
// updates; the connection window bounds what a peer can make this side
// buffer across all its streams.
const (
	quicInitialStreamWindow = 512 << 10
	quicMaxStreamWindow     = MaxReadLimit + 4
	quicInitialConnWindow   = 1 << 20
	quicMaxConnWindow       = 24 << 20
)

// dialSilence is how long a QUIC dial waits for the first packet from the
// daemon before it concludes nothing is listening.
const dialSilence = 2 * time.Second

// quicConfig translates cfg (already defaulted) for quic-go.
func quicConfig(cfg Config) *quic.Config {
	return &quic.Config{
		HandshakeIdleTimeout:           cfg.HandshakeTimeout,
		MaxIdleTimeout:                 cfg.IdleTimeout,
		KeepAlivePeriod:                cfg.IdleTimeout / 3,
		MaxIncomingStreams:             int64(cfg.MaxIncomingChannels),
		MaxIncomingUniStreams:          -1, // the protocol uses bidirectional streams only
		InitialStreamReceiveWindow:     quicInitialStreamWindow,
		MaxStreamReceiveWindow:         quicMaxStreamWindow,
		InitialConnectionReceiveWindow: quicInitialConnWindow,
		MaxConnectionReceiveWindow:     quicMaxConnWindow,
	}
}

// quicTLS returns a copy of tlsConf that speaks only ALPN m2m/1, so a peer
// offering anything else fails the handshake (no_application_protocol).
func quicTLS(tlsConf *tls.Config) *tls.Config {
	c := tlsConf.Clone()
	if c == nil {
		c = &tls.Config{}
	}
	c.NextProtos = []string{ALPN}
	c.MinVersion = tls.VersionTLS13
	return c
}

// QUICListener accepts m2m sessions over QUIC.
type QUICListener struct {
	ln  *quic.Listener
	cfg Config
}

// ListenQUIC listens on the UDP address addr ("127.0.0.1:4433", ":4433").
// tlsConf must carry the server certificate; its NextProtos is replaced
// by ALPN m2m/1 and TLS 1.3 is required.
func ListenQUIC(addr string, tlsConf *tls.Config, cfg Config) (*QUICListener, error) {
	if tlsConf == nil || (len(tlsConf.Certificates) == 0 && tlsConf.GetCertificate == nil && tlsConf.GetConfigForClient == nil) {
		return nil, errors.New("transport: QUIC listener needs a TLS certificate")
	}
	cfg = cfg.withDefaults()
	ln, err := quic.ListenAddr(addr, quicTLS(tlsConf), quicConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("transport: listen quic %s: %w", addr, err)
	}
	return &QUICListener{ln: ln, cfg: cfg}, nil
}

// Accept waits for the next connection whose handshake has completed.
// After Close it fails with ErrClosed.
//
// The client's control stream (stream 0) reaches the daemon with its first
// message, HELLO, so it may not exist yet when Accept returns: Receive
// simply delivers HELLO when it comes, and a Send on ControlChannel before
// then waits for it (bounded by its context). The daemon's 30 s HELLO
// timeout is a Receive with a deadline.
func (l *QUICListener) Accept(ctx context.Context) (Conn, error) {
	qc, err := l.ln.Accept(ctx)
	if err != nil {
		if errors.Is(err, quic.ErrServerClosed) {
			return nil, closedBy(err)
		}
		return nil, err
	}
	return newQUICConn(qc, false, l.cfg)
}

// Close stops accepting. Connections already accepted carry on until they
// are closed themselves.
func (l *QUICListener) Close() error { return l.ln.Close() }

// Addr is the UDP address the listener is bound to.
func (l *QUICListener) Addr() net.Addr { return l.ln.Addr() }

// DialQUIC connects to a daemon at addr ("host:4433") and opens the control
// stream. tlsConf says how to trust the daemon (see package certs); its
// NextProtos is replaced by ALPN m2m/1 and ServerName defaults to addr's
// host. The control stream becomes visible to the daemon with the first
// message sent on ControlChannel, which per the protocol is HELLO.
func DialQUIC(ctx context.Context, addr string, tlsConf *tls.Config, cfg Config) (Conn, error) {
	cfg = cfg.withDefaults()
	tc := quicTLS(tlsConf)
	if tc.ServerName == "" {
		// quic-go would fill it in too; doing it here keeps the name a pin
		// or CA check sees independent of the library.
		if host, _, err := net.SplitHostPort(addr); err == nil {
			tc.ServerName = host
		}
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.HandshakeTimeout)
	defer cancel()
	qcfg := quicConfig(cfg)
	// UDP gives no "connection refused": a daemon that is not there looks
	// like one that is slow. A live one answers the first Initial within a
	// round trip (and two retransmissions fit in dialSilence), so silence
	// for dialSilence means nothing is listening; the whole handshake may
	// still take up to HandshakeTimeout.
	qcfg.HandshakeIdleTimeout = min(cfg.HandshakeTimeout, dialSilence)
	qc, err := quic.DialAddr(ctx, addr, tc, qcfg)
	var idle *quic.IdleTimeoutError
	var hs *quic.HandshakeTimeoutError
	if errors.As(err, &idle) || errors.As(err, &hs) {
		return nil, fmt.Errorf("transport: dial quic %s: no answer within %v: is a daemon listening there (m2md serve --quic-addr)?: %w", addr, qcfg.HandshakeIdleTimeout, err)
	}
	if err != nil {
		return nil, fmt.Errorf("transport: dial quic %s: %w", addr, err)
	}
	if !slices.Contains(tc.NextProtos, qc.ConnectionState().TLS.NegotiatedProtocol) {
		qc.CloseWithError(quicErrProtocol, "ALPN")
		return nil, fmt.Errorf("%w: daemon did not negotiate ALPN %s", ErrProtocol, ALPN)
	}
	return newQUICConn(qc, true, cfg)
}

// Application error codes on the wire (CONNECTION_CLOSE, RESET_STREAM,
// STOP_SENDING). The session protocol says why a session ends in its own
// CLOSE message; these only tell a packet trace what the transport saw.
const (
	quicErrNone       quic.ApplicationErrorCode = 0
	quicErrProtocol   quic.ApplicationErrorCode = 1
	quicStreamAborted quic.StreamErrorCode      = 1 // a Send was cut short mid-message
	quicStreamTooBig  quic.StreamErrorCode      = 2 // a length prefix above the read limit
)

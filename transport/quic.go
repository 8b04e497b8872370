package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
)

// Flow-control windows start small and grow (quic-go auto-tunes them) up
// to the receive budget: what the peer may have in flight towards this
// side unread is bounded by the budget, as is what this side has read and
// not yet handed over (see Config.ReceiveBudget). A stream's window may grow
// to a whole maximum message, so one large message is not stalled waiting
// for window updates when the budget allows it.
const (
	quicInitialStreamWindow = 512 << 10
	quicInitialConnWindow   = 1 << 20
)

// dialSilence is how long a QUIC dial waits for the first packet from the
// daemon before it concludes nothing is listening.
const dialSilence = 2 * time.Second

// quicConfig translates cfg (already defaulted) for quic-go.
func quicConfig(cfg Config) *quic.Config {
	connWindow := uint64(max(cfg.ReceiveBudget, quicInitialConnWindow))
	return &quic.Config{
		HandshakeIdleTimeout: cfg.HandshakeTimeout,
		// quic-go counts idleness from the later of the last packet received
		// and the first ack-eliciting packet sent after it (a keep-alive),
		// so a silence is noticed after idle timeout + keep-alive period at
		// worst: four fifths and one fifth make it IdleTimeout.
		MaxIdleTimeout:                 cfg.IdleTimeout * 4 / 5,
		KeepAlivePeriod:                cfg.IdleTimeout / 5,
		EnableDatagrams:                true, // resetProbe
		MaxIncomingStreams:             int64(cfg.MaxIncomingChannels),
		MaxIncomingUniStreams:          -1, // the protocol uses bidirectional streams only
		InitialStreamReceiveWindow:     quicInitialStreamWindow,
		MaxStreamReceiveWindow:         min(connWindow, MaxReadLimit+4),
		InitialConnectionReceiveWindow: quicInitialConnWindow,
		MaxConnectionReceiveWindow:     connWindow,
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

// QUICListener accepts m2m sessions over QUIC. It owns its UDP socket
// (a quic.Transport), which every connection it accepted shares: Close
// stops accepting but keeps the socket for those connections and for
// refusing new ones; Unbind frees it.
type QUICListener struct {
	udp *net.UDPConn
	tr  *quic.Transport
	ln  *quic.Listener
	cfg Config

	refusing  atomic.Bool
	closed    context.Context // ended by Close: unblocks Accept
	stop      context.CancelFunc
	closeOnce sync.Once
	unbind    sync.Once
	refuser   sync.WaitGroup
}

// ListenQUIC listens on the UDP address addr ("127.0.0.1:4433", ":4433").
// tlsConf must carry the server certificate; its NextProtos is replaced
// by ALPN m2m/1 and TLS 1.3 is required. A packet for a connection the
// listener does not know (one its predecessor on addr held, before a
// crash or restart) is answered with a stateless reset, whose key comes
// from the certificate's private key (statelessResetKey).
func ListenQUIC(addr string, tlsConf *tls.Config, cfg Config) (*QUICListener, error) {
	if tlsConf == nil || (len(tlsConf.Certificates) == 0 && tlsConf.GetCertificate == nil && tlsConf.GetConfigForClient == nil) {
		return nil, errors.New("transport: QUIC listener needs a TLS certificate")
	}
	cfg = cfg.withDefaults()
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("transport: listen quic %s: %w", addr, err)
	}
	udp, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, fmt.Errorf("transport: listen quic %s: %w", addr, err)
	}
	l := &QUICListener{udp: udp, tr: &quic.Transport{
		Conn:               udp,
		StatelessResetKey:  statelessResetKey(tlsConf),
		ConnectionIDLength: quicConnIDLen,
	}, cfg: cfg}
	l.closed, l.stop = context.WithCancel(context.Background())
	base := quicConfig(cfg)
	qconf := base.Clone()
	qconf.GetConfigForClient = func(*quic.ClientInfo) (*quic.Config, error) {
		if l.refusing.Load() {
			// quic-go answers CONNECTION_REFUSED at once, before any
			// handshake work.
			return nil, ErrClosed
		}
		return base, nil // what it returns replaces the whole config
	}
	if l.ln, err = l.tr.Listen(quicTLS(tlsConf), qconf); err != nil {
		udp.Close()
		return nil, fmt.Errorf("transport: listen quic %s: %w", addr, err)
	}
	return l, nil
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
	if l.refusing.Load() {
		return nil, ErrClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(l.closed, cancel)()
	qc, err := l.ln.Accept(ctx)
	if err != nil {
		if errors.Is(err, quic.ErrServerClosed) || l.closed.Err() != nil {
			return nil, ErrClosed
		}
		return nil, err
	}
	if l.refusing.Load() {
		// Its handshake began before Close: refuse it like the others.
		qc.CloseWithError(quicErrRefused, "not accepting connections")
		return nil, ErrClosed
	}
	return newQUICConn(qc, false, l.cfg)
}

// Close stops accepting: Accept fails with ErrClosed, and a new connection
// is refused at once (QUIC CONNECTION_REFUSED, or, if its handshake had
// begun, closed with an application error) rather than left to time out.
// Connections already accepted carry on over the listener's socket until
// Unbind.
func (l *QUICListener) Close() error {
	l.closeOnce.Do(func() {
		l.refusing.Store(true)
		l.stop()
		// Handshakes that began before Close end in the accept queue:
		// take and refuse them until Unbind.
		l.refuser.Add(1)
		go func() {
			defer l.refuser.Done()
			for {
				qc, err := l.ln.Accept(context.Background())
				if err != nil {
					return
				}
				qc.CloseWithError(quicErrRefused, "not accepting connections")
			}
		}()
	})
	return nil
}

// Unbind stops accepting, if Close has not, and closes the UDP socket:
// when it returns the port is free. Connections still open over it end
// abruptly, without telling their peers: close them first.
func (l *QUICListener) Unbind() error {
	l.Close()
	var err error
	l.unbind.Do(func() {
		l.ln.Close()
		l.tr.Close() // waits for its reader; the socket is ours to close
		err = l.udp.Close()
		l.refuser.Wait()
	})
	return err
}

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
	quicErrRefused    quic.ApplicationErrorCode = 2 // a listener that has stopped accepting
	quicStreamAborted quic.StreamErrorCode      = 1 // a Send was cut short mid-message
	quicStreamTooBig  quic.StreamErrorCode      = 2 // a length prefix above the read limit
)

package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/coder/websocket"
)

// WSHandler is the daemon's side of the WebSocket transport: an
// http.Handler to mount on the daemon's own mux and http.Server, for ws://
// and wss:// alike (TLS is the server's business). It upgrades requests that
// offer the subprotocol m2m.v1 and calls serve with each connection on a
// goroutine of its own; the connection is closed when serve returns.
//
// ServeHTTP returns as soon as the upgrade is done, without waiting for
// serve: holding the request's goroutine for the session's lifetime would
// keep net/http's request and response state (about 3.5 KiB) alive for
// nothing. The hijacked connection is no longer tracked by http.Server
// (neither before nor after this choice), so a caller that needs to wait for
// its sessions at shutdown counts them in serve.
//
//	mux.Handle("/m2m", transport.NewWSHandler(cfg, func(c transport.Conn) {
//		runSession(c)
//	}))
type WSHandler struct {
	cfg   Config
	serve func(Conn)

	// OriginPatterns lists the browser origins (besides the request's own
	// host) allowed to connect, as in websocket.AcceptOptions. Agents that
	// are not browsers send no Origin header and are not affected.
	OriginPatterns []string
}

// NewWSHandler returns a handler that passes each accepted connection to
// serve.
func NewWSHandler(cfg Config, serve func(Conn)) *WSHandler {
	return &WSHandler{cfg: cfg.withDefaults(), serve: serve}
}

func (h *WSHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !offersSubprotocol(r.Header.Values("Sec-WebSocket-Protocol"), Subprotocol) {
		// Refused before the upgrade, so the client sees a plain HTTP error
		// that says what is missing rather than a WebSocket that closes.
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Sec-WebSocket-Version", "13")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, "m2md: this endpoint needs the WebSocket subprotocol %q (Sec-WebSocket-Protocol)\n", Subprotocol)
		return
	}
	// Under the library: the tap (reads) over the cork (writes) over the
	// hijacked connection.
	cw := &corkingResponseWriter{ResponseWriter: w}
	tap := &wsTap{}
	tap.limit.Store(DefaultReadLimit)
	ws, err := websocket.Accept(&tapWriter{ResponseWriter: cw, tap: tap}, r, &websocket.AcceptOptions{
		Subprotocols:    []string{Subprotocol},
		OriginPatterns:  h.OriginPatterns,
		CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		return // Accept has written the HTTP error
	}
	c := newWSConn(ws, cw.cork, parseRemoteAddr(r.RemoteAddr), h.cfg, tap)
	go func() {
		defer c.Close()
		h.serve(c)
	}()
}

// offersSubprotocol reports whether the Sec-WebSocket-Protocol header
// values (each a comma-separated token list) contain want.
func offersSubprotocol(values []string, want string) bool {
	for _, v := range values {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.TrimSpace(tok) == want {
				return true
			}
		}
	}
	return false
}

func parseRemoteAddr(s string) net.Addr {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return net.TCPAddrFromAddrPort(ap)
	}
	return wsAddr(s)
}

// wsAddr is a remote address known only as text.
type wsAddr string

func (a wsAddr) Network() string { return "tcp" }
func (a wsAddr) String() string  { return string(a) }

// DialWS connects to a daemon at url (ws://host:8080/m2m or
// wss://host:8443/m2m) asking for the subprotocol m2m.v1. tlsConf is used
// for wss:// (nil: system roots; see package certs); its NextProtos is
// replaced by http/1.1, which WebSocket needs. Proxies from the environment
// (HTTPS_PROXY …) are honoured.
func DialWS(ctx context.Context, url string, tlsConf *tls.Config, cfg Config) (Conn, error) {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, cfg.HandshakeTimeout)
	defer cancel()

	var tc *tls.Config
	if tlsConf != nil {
		tc = tlsConf.Clone()
		tc.NextProtos = []string{"http/1.1"}
	}
	// The cork goes under TLS on wss:// (net/http does the handshake on
	// the connection dialled here, which also keeps proxies working): a
	// batch leaves in one system call, as one TLS record per message.
	var cork *corkConn
	dialer := &net.Dialer{}
	tr := &http.Transport{
		Proxy:           http.ProxyFromEnvironment,
		TLSClientConfig: tc,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			nc, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			cork = newCorkConn(nc)
			return cork, nil
		},
		ForceAttemptHTTP2: false,
	}
	defer tr.CloseIdleConnections()

	ws, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{
		HTTPClient:      &http.Client{Transport: tr},
		Subprotocols:    []string{Subprotocol},
		CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusNotFound {
			return nil, fmt.Errorf("transport: dial %s: HTTP 404: no WebSocket endpoint at this path; the daemon's is its --ws-path, /m2m by default (ws://host:8080/m2m): %w", url, err)
		}
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, fmt.Errorf("transport: dial %s: HTTP %d: %w", url, resp.StatusCode, err)
		}
		return nil, fmt.Errorf("transport: dial %s: %w", url, err)
	}
	if ws.Subprotocol() != Subprotocol {
		ws.Close(websocket.StatusProtocolError, "subprotocol m2m.v1 required")
		return nil, fmt.Errorf("%w: daemon did not select WebSocket subprotocol %s", ErrProtocol, Subprotocol)
	}
	if cork == nil {
		// Not possible with net/http's transport, which dials through
		// DialContext.
		ws.CloseNow()
		return nil, fmt.Errorf("transport: dial %s: connection not made through the dialer", url)
	}
	return newWSConn(ws, cork, cork.RemoteAddr(), cfg, nil), nil
}

// errWSLimit tells the library's read-limit error apart.
func isWSTooBig(err error) bool { return errors.Is(err, websocket.ErrMessageTooBig) }

package bench

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"
	"strings"

	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/transport"
)

// Transports a load run can use.
const (
	TransportQUIC = "quic"
	TransportWS   = "ws"
	TransportWSS  = "wss"
)

// endpoint is where the generator's agents connect: a daemon, the bare
// relay or the echo target.
type endpoint struct {
	transport string // quic, ws or wss
	addr      string // host:port for quic, the URL for ws and wss
	tls       *tls.Config
}

// parseTarget reads a daemon URL: quic://host:port, ws://host:port/path,
// wss://host:port/path. A ws URL without a path gets the daemon's default.
func parseTarget(raw string, tlsConf *tls.Config) (endpoint, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return endpoint{}, fmt.Errorf("bench: target %q is not a quic://, ws:// or wss:// URL", raw)
	}
	switch u.Scheme {
	case "quic":
		host := u.Host
		if u.Port() == "" {
			host += ":4433"
		}
		return endpoint{transport: TransportQUIC, addr: host, tls: tlsConf}, nil
	case "ws", "wss":
		if u.Path == "" {
			u.Path = daemon.DefaultWSPath
		}
		return endpoint{transport: u.Scheme, addr: u.String(), tls: tlsConf}, nil
	}
	return endpoint{}, fmt.Errorf("bench: target %q: scheme must be quic, ws or wss", raw)
}

func (e endpoint) String() string {
	if e.transport == TransportQUIC {
		return "quic://" + e.addr
	}
	return e.addr
}

// dial opens one connection.
func (e endpoint) dial(ctx context.Context, cfg transport.Config) (transport.Conn, error) {
	if e.transport == TransportQUIC {
		return transport.DialQUIC(ctx, e.addr, e.tls, cfg)
	}
	var tc *tls.Config
	if strings.HasPrefix(e.addr, "wss:") {
		tc = e.tls
	}
	return transport.DialWS(ctx, e.addr, tc, cfg)
}

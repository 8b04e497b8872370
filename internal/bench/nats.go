package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/m2md/m2md/certs"
	"github.com/m2md/m2md/transport"
)

// The NATS comparison (--compare nats) runs the same load through an
// embedded nats-server, in this process like the in-process daemon: what an
// engineer would use instead of m2md for agents' request/reply traffic.
// Providers are nats.go queue-group subscribers that answer each request
// with msg.Respond; requesters publish each request with a reply subject on
// their connection's inbox, which is how nats.go's own Request works (minus
// its per-request channel and timer), so that the same requester code, load
// shape and reply checks serve both runs. Over QUIC and wss the NATS
// connections use TLS (the same development certificate), so each
// transport is compared with a peer that pays for encryption; over ws they
// are plain TCP, like ws.
//
// With LoadConfig.NATSURL the load goes to a nats-server that runs in its
// own process instead, as a daemon at LoadConfig.Target does: then neither
// server shares this process's Go scheduler with the load generator.
const (
	natsSubjectPrefix = "m2md.bench.requests."
	natsQueue         = "providers"
)

// natsTarget is the server and how to reach it.
type natsTarget struct {
	srv  *server.Server // nil for a server of the user's (LoadConfig.NATSURL)
	url  string
	opts []nats.Option
	// subject is the run's own: a server of the user's may carry other
	// traffic, which must neither see the run's requests nor answer them.
	subject string
}

func newNATSTarget(url string) *natsTarget {
	return &natsTarget{
		url:     url,
		opts:    []nats.Option{nats.Name("m2md-bench"), nats.MaxReconnects(0)},
		subject: natsSubjectPrefix + randomSuffix(),
	}
}

// parseNATSURL checks a --nats-url: one nats:// or tls:// server.
func parseNATSURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "nats" && u.Scheme != "tls") {
		return nil, fmt.Errorf("bench: --nats-url %q is not a nats:// or tls:// URL (nats://127.0.0.1:4222)", raw)
	}
	return u, nil
}

// remoteNATS is a nats-server of the user's, at raw; tlsConf verifies it
// when raw is a tls:// URL.
func remoteNATS(raw string, tlsConf *tls.Config) (*natsTarget, error) {
	u, err := parseNATSURL(raw)
	if err != nil {
		return nil, err
	}
	t := newNATSTarget(raw)
	if u.Scheme == "tls" {
		t.opts = append(t.opts, nats.Secure(tlsConf)) // nil: the system roots, as nats.go defaults
	}
	return t, nil
}

func natsUsesTLS(tr string) bool { return tr == TransportQUIC || tr == TransportWSS }

// startNATS starts an embedded nats-server on a loopback port, with TLS
// when tr is quic or wss; maxMsg is the largest message the run sends.
func startNATS(tr string, certDir string, maxMsg int) (*natsTarget, error) {
	opts := &server.Options{
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		NoLog:      true,
		NoSigs:     true,
		MaxPayload: int32(max(1<<20, maxMsg+1024)),
	}
	t := newNATSTarget("")
	if natsUsesTLS(tr) {
		cert, fp, err := certs.EnsureDevCert(certDir)
		if err != nil {
			return nil, err
		}
		clientTLS, err := certs.ClientTLSConfig(certs.ClientOptions{PinSHA256: fp})
		if err != nil {
			return nil, err
		}
		opts.TLS, opts.TLSConfig, opts.TLSTimeout = true, certs.ServerTLSConfig(cert), 5
		t.opts = append(t.opts, nats.Secure(clientTLS))
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("bench: nats-server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("bench: nats-server did not start in 10 s")
	}
	t.srv = srv
	scheme := "nats"
	if natsUsesTLS(tr) {
		scheme = "tls"
	}
	t.url = fmt.Sprintf("%s://%s", scheme, srv.Addr().String())
	return t, nil
}

func (t *natsTarget) stop() {
	if t.srv == nil {
		return
	}
	t.srv.Shutdown()
	t.srv.WaitForShutdown()
}

func (t *natsTarget) connect() (*nats.Conn, error) {
	nc, err := nats.Connect(t.url, t.opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to nats-server at %s: %w", t.url, err)
	}
	return nc, nil
}

// natsProvider is an echo responder in the providers queue group.
type natsProvider struct {
	nc          *nats.Conn
	serviceTime time.Duration
	errs        *counters
	served      sync.WaitGroup
}

func startNATSProvider(t *natsTarget, serviceTime time.Duration, errs *counters) (*natsProvider, error) {
	nc, err := t.connect()
	if err != nil {
		return nil, err
	}
	p := &natsProvider{nc: nc, serviceTime: serviceTime, errs: errs}
	if _, err := nc.QueueSubscribe(t.subject, natsQueue, p.handle); err != nil {
		nc.Close()
		return nil, err
	}
	// The subscription must be known to the server before requests come.
	if err := nc.Flush(); err != nil {
		nc.Close()
		return nil, err
	}
	return p, nil
}

func (p *natsProvider) handle(m *nats.Msg) {
	if p.serviceTime <= 0 {
		if err := m.Respond(m.Data); err != nil {
			p.errs.add("provider_send_failed")
		}
		return
	}
	data, reply := bytes.Clone(m.Data), m.Reply
	p.served.Add(1)
	time.AfterFunc(p.serviceTime, func() {
		defer p.served.Done()
		if err := p.nc.Publish(reply, data); err != nil {
			p.errs.add("provider_send_failed")
		}
	})
}

func (p *natsProvider) stop() {
	p.served.Wait()
	p.nc.Close()
}

// natsConn is a requester's NATS connection seen as a transport.Conn: Send
// publishes a request with the connection's inbox as its reply subject,
// Receive returns the replies arriving there. One channel, like WebSocket.
type natsConn struct {
	nc        *nats.Conn
	subject   string
	inbox     string
	replies   chan *nats.Msg
	done      chan struct{}
	closeOnce sync.Once
}

func dialNATSRequester(t *natsTarget, inFlight int) (*natsConn, error) {
	nc, err := t.connect()
	if err != nil {
		return nil, err
	}
	c := &natsConn{nc: nc, subject: t.subject, inbox: nc.NewRespInbox(), replies: make(chan *nats.Msg, inFlight+64), done: make(chan struct{})}
	if _, err := nc.ChanSubscribe(c.inbox, c.replies); err != nil {
		nc.Close()
		return nil, err
	}
	if err := nc.Flush(); err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

func (c *natsConn) Receive(ctx context.Context) (transport.Message, error) {
	select {
	case m := <-c.replies:
		return transport.Message{Data: m.Data}, nil
	default:
	}
	select {
	case m := <-c.replies:
		return transport.Message{Data: m.Data}, nil
	case <-c.done:
		return transport.Message{}, transport.ErrClosed
	case <-ctx.Done():
		return transport.Message{}, ctx.Err()
	}
}

func (c *natsConn) Send(_ context.Context, _ transport.ChannelID, msg []byte) error {
	if err := c.nc.PublishRequest(c.subject, c.inbox, msg); err != nil {
		if errors.Is(err, nats.ErrConnectionClosed) {
			return transport.ErrClosed
		}
		return err
	}
	return nil
}

// Cork and Uncork: nats.go batches by itself. Publish only appends to the
// connection's buffer; its flusher goroutine writes whatever has collected
// in one system call.
func (c *natsConn) Cork()         {}
func (c *natsConn) Uncork() error { return nil }

func (c *natsConn) AcquireChannel(context.Context) (transport.ChannelID, error) {
	return transport.ControlChannel, nil
}
func (c *natsConn) ReleaseChannel(transport.ChannelID) {}
func (c *natsConn) SetReadLimit(int64)                 {}
func (c *natsConn) Transport() string                  { return "nats" }
func (c *natsConn) RemoteAddr() net.Addr               { return natsAddr(c.nc.ConnectedAddr()) }

func (c *natsConn) Close() error {
	c.closeOnce.Do(func() {
		close(c.done)
		c.nc.Close()
	})
	return nil
}

// Abort is Close: the NATS connection has nothing to wait for.
func (c *natsConn) Abort() { c.Close() }

type natsAddr string

func (a natsAddr) Network() string { return "tcp" }
func (a natsAddr) String() string  { return string(a) }

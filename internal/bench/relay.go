package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/m2md/m2md/certs"
	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/transport"
)

// Roles a connection announces to the bare relay in its first message.
const (
	roleRequester byte = 'R'
	roleProvider  byte = 'P'
)

// relayServer is the baseline the daemon is compared with: the same
// transport library and the same stream design (QUIC: each side's
// requests on one stream, transport.ShareDataChannel, as in sessions with
// feature shared_stream; WebSocket: one connection), and nothing of
// the M2M protocol: no handshake beyond one role byte, no DATA header, no
// frame header, no security, no sequence numbers. It reads the first 8
// bytes of each message, a tag, and swaps it for its own so that replies
// find their way back, exactly the minimum a relay that multiplexes many
// requesters over few providers must do; the payload is never touched.
//
// In echo mode it is the trivially fast target: every message goes straight
// back on its channel, which measures the load generator itself.
type relayServer struct {
	echo bool
	ep   endpoint

	quic  *transport.QUICListener
	http  *http.Server
	ctx   context.Context
	stopF context.CancelFunc
	wg    sync.WaitGroup

	mu        sync.Mutex
	conns     map[transport.Conn]struct{}
	providers []*relayPeer
	next      atomic.Uint64
	pending   relayTable
}

type relayPeer struct {
	conn   transport.Conn
	perReq bool // QUIC: a channel acquired per request (the shared one)
}

// startRelay starts a relay (or, with echo, the echo target) on loopback
// for transport tr; certDir holds its development certificate.
func startRelay(tr string, echo bool, certDir string) (*relayServer, error) {
	ctx, cancel := context.WithCancel(context.Background())
	r := &relayServer{echo: echo, ctx: ctx, stopF: cancel, conns: make(map[transport.Conn]struct{})}
	cert, fp, err := certs.EnsureDevCert(certDir)
	if err != nil {
		cancel()
		return nil, err
	}
	clientTLS, err := certs.ClientTLSConfig(certs.ClientOptions{PinSHA256: fp})
	if err != nil {
		cancel()
		return nil, err
	}
	cfg := transport.Config{}
	switch tr {
	case TransportQUIC:
		ln, err := transport.ListenQUIC("127.0.0.1:0", certs.ServerTLSConfig(cert), cfg)
		if err != nil {
			cancel()
			return nil, err
		}
		r.quic = ln
		r.ep = endpoint{transport: TransportQUIC, addr: ln.Addr().String(), tls: clientTLS}
		r.wg.Go(func() {
			for {
				c, err := ln.Accept(ctx)
				if err != nil {
					return
				}
				r.wg.Go(func() { r.serve(c) })
			}
		})
	case TransportWS, TransportWSS:
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			cancel()
			return nil, err
		}
		mux := http.NewServeMux()
		mux.Handle(daemon.DefaultWSPath, transport.NewWSHandler(cfg, r.serve))
		r.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		scheme := "ws"
		if tr == TransportWSS {
			scheme = "wss"
			tc := certs.ServerTLSConfig(cert)
			tc.NextProtos = []string{"http/1.1"}
			ln = tls.NewListener(ln, tc)
		}
		r.ep = endpoint{transport: tr, addr: scheme + "://" + ln.Addr().String() + daemon.DefaultWSPath, tls: clientTLS}
		r.wg.Go(func() { _ = r.http.Serve(ln) })
	default:
		cancel()
		return nil, errors.New("bench: unknown transport " + tr)
	}
	return r, nil
}

// stop closes the listeners and every connection, and waits.
func (r *relayServer) stop() {
	r.stopF()
	if r.quic != nil {
		r.quic.Close()
	}
	if r.http != nil {
		r.http.Close()
	}
	r.mu.Lock()
	conns := make([]transport.Conn, 0, len(r.conns))
	for c := range r.conns {
		conns = append(conns, c)
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() { c.Close() })
	}
	wg.Wait()
	r.wg.Wait()
	if r.quic != nil {
		r.quic.Unbind()
	}
}

func (r *relayServer) serve(c transport.Conn) {
	defer c.Close()
	r.mu.Lock()
	if r.ctx.Err() != nil {
		r.mu.Unlock()
		return
	}
	r.conns[c] = struct{}{}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.conns, c)
		r.mu.Unlock()
	}()
	c.SetReadLimit(transport.MaxReadLimit)

	hctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	hello, err := c.Receive(hctx)
	cancel()
	if err != nil {
		return
	}
	role := byte(0)
	if len(hello.Data) > 0 {
		role = hello.Data[0]
	}
	hello.Release()
	transport.ShareDataChannel(c)
	peer := &relayPeer{conn: c, perReq: c.Transport() == TransportQUIC}
	if role == roleProvider && !r.echo {
		r.addProvider(peer)
		defer r.removeProvider(peer)
	}
	// The acknowledgement tells the agent it is registered, so the first
	// request never finds the relay without providers.
	if err := c.Send(r.ctx, transport.ControlChannel, []byte{role}); err != nil {
		return
	}
	// Batches as the agents do: the echo's answers, and the refusals a
	// requester gets, leave together. Forwards go to other connections,
	// where concurrent Sends join each other's batches.
	_ = receiveBatches(r.ctx, c, func(msg transport.Message) error {
		switch {
		case r.echo:
			_ = c.Send(context.Background(), msg.Channel, msg.Data)
		case role == roleProvider:
			r.forwardReply(peer, &msg)
		default:
			r.forwardRequest(peer, &msg)
		}
		msg.Release()
		return nil
	})
}

func (r *relayServer) addProvider(p *relayPeer) {
	r.mu.Lock()
	r.providers = append(r.providers, p)
	r.mu.Unlock()
}

func (r *relayServer) removeProvider(p *relayPeer) {
	r.mu.Lock()
	for i, q := range r.providers {
		if q == p {
			r.providers = append(r.providers[:i], r.providers[i+1:]...)
			break
		}
	}
	r.mu.Unlock()
}

func (r *relayServer) pick() *relayPeer {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.providers) == 0 {
		return nil
	}
	return r.providers[r.next.Add(1)%uint64(len(r.providers))]
}

// forwardRequest sends a requester's message to a provider under a tag of
// the relay's own.
func (r *relayServer) forwardRequest(req *relayPeer, msg *transport.Message) {
	if len(msg.Data) < tagLen {
		return
	}
	tag := readTag(msg.Data)
	fail := func() {
		var b [tagLen]byte
		putTag(b[:], tag)
		_ = req.conn.Send(context.Background(), msg.Channel, b[:])
	}
	prov := r.pick()
	if prov == nil {
		fail()
		return
	}
	var pch transport.ChannelID
	if prov.perReq {
		// The context matters only when every stream the provider allows is
		// taken (the relay then waits: backpressure); a timer per request
		// would be a cost the relay does not need.
		c, err := prov.conn.AcquireChannel(r.ctx)
		if err != nil {
			fail()
			return
		}
		pch = c
	}
	slot := r.pending.put(relayEntry{req: req, reqCh: msg.Channel, tag: tag, prov: prov, provCh: pch})
	putTag(msg.Data, slot)
	if err := prov.conn.Send(context.Background(), pch, msg.Data); err != nil {
		if _, ok := r.pending.take(slot); ok {
			putTag(msg.Data, tag)
			fail()
		}
	}
}

// forwardReply sends a provider's reply back to the requester it answers.
func (r *relayServer) forwardReply(prov *relayPeer, msg *transport.Message) {
	if len(msg.Data) < tagLen {
		return
	}
	e, ok := r.pending.take(readTag(msg.Data))
	if !ok {
		return
	}
	if prov.perReq {
		prov.conn.ReleaseChannel(msg.Channel)
	}
	putTag(msg.Data, e.tag)
	_ = e.req.conn.Send(context.Background(), e.reqCh, msg.Data)
}

// relayTable maps the relay's tags to the requests they stand for.
type relayTable struct {
	mu      sync.Mutex
	entries []relayEntry
	gens    []uint64
	free    []int
}

type relayEntry struct {
	req    *relayPeer
	reqCh  transport.ChannelID
	tag    uint64
	prov   *relayPeer
	provCh transport.ChannelID
}

func (t *relayTable) put(e relayEntry) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var idx int
	if n := len(t.free); n > 0 {
		idx = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		idx = len(t.entries)
		t.entries = append(t.entries, relayEntry{})
		t.gens = append(t.gens, 0)
	}
	t.entries[idx] = e
	t.gens[idx]++
	return t.gens[idx]<<slotBits | uint64(idx+1)
}

func (t *relayTable) take(tag uint64) (relayEntry, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	idx := int(tag&slotMask) - 1
	if idx < 0 || idx >= len(t.entries) || t.gens[idx] != tag>>slotBits || t.entries[idx].req == nil {
		return relayEntry{}, false
	}
	e := t.entries[idx]
	t.entries[idx] = relayEntry{}
	t.free = append(t.free, idx)
	return e, true
}

// dialTag connects a requester or provider to the relay.
func dialTag(ctx context.Context, ep endpoint, role byte) (transport.Conn, error) {
	conn, err := ep.dial(ctx, transport.Config{})
	if err != nil {
		return nil, err
	}
	conn.SetReadLimit(transport.MaxReadLimit)
	transport.ShareDataChannel(conn)
	if err := conn.Send(ctx, transport.ControlChannel, []byte{role}); err != nil {
		conn.Close()
		return nil, err
	}
	ack, err := conn.Receive(ctx)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("bench: relay did not acknowledge: %w", err)
	}
	ack.Release()
	return conn, nil
}

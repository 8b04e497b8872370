package cluster

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/m2md/m2md/internal/configerr"
)

// Handler is what the daemon does with what arrives from the cluster. Every
// method is called from one goroutine, in the order the messages arrived, so
// a node's replies (and a stream's chunks) reach the daemon in the order the
// node sent them. Methods must not block: they route and queue, never wait.
// The strings of a Request, Reply, Cancel or Notice alias the message's
// bytes (never written to, so they stay valid); clone one kept for long so
// that it does not keep the whole message alive.
type Handler interface {
	// AgentUp: a - registered on another node - is now the newest
	// registration of its id that node knows of.
	AgentUp(a Agent)
	// AgentDown: a's session on its node ended (or its node is dead).
	AgentDown(a Agent)
	// NodeDown: the node stopped heartbeating or left; AgentDown has been
	// called for each of its agents already. Requests it made are void.
	NodeDown(node string)
	// Request: a request for an agent registered on this node (or one to
	// answer with an error: Request.Shed, Request.Stranger).
	Request(r *Request)
	// Reply: a reply to a request this node sent (Reply.W is its id).
	Reply(r *Reply)
	// Cancel: the requester of a request this node is serving cancelled it.
	Cancel(c *Cancel)
	// Notice: a reply to a request this node is serving could not be
	// delivered to its requester on the sending node.
	Notice(n *Notice)
	// Lost: a request or reply this node sent never reached its node
	// (NATS dropped it), or messages between this node and another were
	// lost beyond naming (seq.go). Answer it as a refusal.
	Lost(l *Lost)
}

// Cluster is this node's membership of the cluster: the NATS connection
// (and, in embedded mode, the NATS server), the heartbeats and the agent
// tables. Create it with Start.
type Cluster struct {
	cfg  Config
	log  zerolog.Logger
	h    Handler
	srv  *server.Server // embedded mode only
	nc   *nats.Conn
	subs []*nats.Subscription

	prefix  string // "m2md.<name>."
	ctlSubj string
	mySubj  string
	dests   sync.Map // node id -> *dest (seq.go)
	// rx is what this node knows of each node's data sequence numbers
	// (seq.go; dispatcher goroutine only).
	rx        map[string]series
	ringSize  int
	gapLogged time.Time // when a gap was last logged (dispatcher only)

	// arrive is where NATS delivers; inbox is what waits for the
	// dispatcher (its bytes in Stats.InboxBytes), and overflow counts
	// what found it full (inbox.go).
	arrive   chan *nats.Msg
	inbox    chan inMsg
	overflow atomic.Uint64
	done     chan struct{}
	wg       sync.WaitGroup

	inc string // this start's incarnation (ctlMsg.Inc)

	// me is this node's identity, members every other node's (node id ->
	// *member), nonces the counter of the data messages this node sealed
	// (auth.go). ctlMu orders the control counter (ctlCtr) with publishing.
	me         *self
	members    sync.Map
	nonces     atomic.Uint64
	ctlMu      sync.Mutex
	ctlCtr     uint64
	dropLogged atomic.Int64 // unix nanoseconds of the last drop logged
	// forgotten keeps the counters of identities forgetMembers let go
	// (node id -> forgotten; dispatcher only), so that hearing the same
	// incarnation again does not start its counters from 0 (auth.go).
	forgotten map[string]forgotten

	mu    sync.Mutex // local and seq; held while publishing events so seq order is publish order
	seq   uint64
	local map[string]Agent // by session id

	peers map[string]*peer // dispatcher goroutine only
	// heard is when each node's last control message arrived (node id ->
	// *atomic.Int64, unix nanoseconds), noted by a subscription of its own
	// as messages arrive: a heartbeat queued behind a backlog for the
	// dispatcher is not a missing one, and a busy node must not declare
	// its peers dead (ending every request to their agents).
	heard sync.Map

	bufs sync.Pool

	stats Stats
}

// Stats are the node's cluster counters (for /metrics).
type Stats struct {
	Nodes        atomic.Int64  // other nodes alive
	RemoteAgents atomic.Int64  // agents registered on other nodes
	InboxBytes   atomic.Int64  // bytes of messages waiting for the dispatcher
	Sent         atomic.Uint64 // data messages published
	Received     atomic.Uint64 // data messages received
	// Shed: requests and replies not delivered because the inbox was
	// full; each was answered with an error (Request.Shed, Reply.Shed).
	Shed atomic.Uint64
	// SlowConsumer: data messages from other nodes that never arrived
	// (NATS dropped them when even the inbox's headroom was full), seen
	// by their sequence numbers and reported to their senders to answer.
	SlowConsumer atomic.Uint64
	// LostAnswered: this node's data messages that other nodes reported
	// lost and that were answered (an error to the requester, a NOTICE
	// to the provider, or sent again). LostUnnamed: reported lost when
	// this node no longer remembered them: every request between the two
	// nodes was ended instead.
	LostAnswered, LostUnnamed atomic.Uint64
	// Dropped counts the messages dropped without an answer, by reason
	// (DropReason): undecodable, unauthenticated, replayed, from a node
	// that is not (or no longer) a member, or speaking for what the
	// sender may not.
	Dropped    [numDropReasons]atomic.Uint64
	SendFailed atomic.Uint64 // publishes that failed (connection down)
	NodesDown  atomic.Uint64 // nodes declared dead
}

type peer struct {
	inc        string
	lastSeen   time.Time
	seq        uint64
	syncing    bool
	syncAsked  time.Time
	agents     map[string]Agent // by session id
	everSynced bool
}

// Start joins the cluster described by cfg (embedded or external mode) and
// begins delivering to h.
func Start(cfg Config, h Handler) (*Cluster, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		cfg:    cfg,
		log:    cfg.Logger.With().Str("node", cfg.Node).Logger(),
		h:      h,
		prefix: "m2md." + cfg.Name + ".",
		inc:    randomID(),
		arrive: make(chan *nats.Msg, arriveCap),
		inbox:  make(chan inMsg, inboxCap(&cfg)),
		done:   make(chan struct{}),
		local:  make(map[string]Agent),
		peers:  make(map[string]*peer),
		rx:     make(map[string]series),
	}
	if c.me, err = newSelf(&cfg); err != nil {
		return nil, err
	}
	c.ringSize = ringSize(&cfg)
	c.ctlSubj = c.prefix + "ctl"
	c.mySubj = c.prefix + "n." + cfg.Node
	c.bufs.New = func() any { b := make([]byte, 0, 2048); return &b }

	opts := []nats.Option{
		nats.Name("m2md-" + cfg.Node),
		nats.NoEcho(),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectBufSize(64 << 20),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			// A slow consumer's losses are counted (and answered) by
			// their sequence numbers (seq.go).
			c.log.Warn().Err(err).Msg("cluster connection error")
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			c.log.Warn().Err(err).Msg("disconnected from NATS; reconnecting")
		}),
		nats.ReconnectHandler(func(*nats.Conn) { c.log.Info().Msg("reconnected to NATS") }),
	}
	var url string
	if cfg.Listen != "" {
		token := randomID() + randomID()
		if c.srv, err = startEmbedded(cfg, token); err != nil {
			return nil, err
		}
		url = "nats://" + c.srv.Addr().String()
		opts = append(opts, nats.Token(token))
	} else {
		url = strings.Join(cfg.URLs, ",")
		if cfg.CredsFile != "" {
			opts = append(opts, nats.UserCredentials(cfg.CredsFile))
		}
		if cfg.NkeyFile != "" {
			opt, err := nats.NkeyOptionFromSeed(cfg.NkeyFile)
			if err != nil {
				return nil, configerr.New(fieldNkeyFile, "cluster: "+fieldNkeyFile+" %s: %w", cfg.NkeyFile, err)
			}
			opts = append(opts, opt)
		}
		if cfg.CAFile != "" {
			opts = append(opts, nats.RootCAs(cfg.CAFile))
		}
	}
	if c.nc, err = nats.Connect(url, opts...); err != nil {
		c.shutdownServer()
		return nil, fmt.Errorf("cluster: connecting to NATS: %w", err)
	}
	for _, subj := range []string{c.ctlSubj, c.mySubj} {
		// One channel for both subjects: the client's reader hands messages
		// over in the order the server sent them, so a node's events,
		// snapshots and data keep their relative order.
		sub, err := c.nc.ChanSubscribe(subj, c.arrive)
		if err != nil {
			c.nc.Close()
			c.shutdownServer()
			return nil, fmt.Errorf("cluster: subscribing %s: %w", subj, err)
		}
		c.subs = append(c.subs, sub)
	}
	hsub, err := c.nc.Subscribe(c.ctlSubj, c.noteHeard)
	if err == nil {
		c.subs = append(c.subs, hsub)
		err = c.nc.Flush()
	}
	if err != nil {
		c.nc.Close()
		c.shutdownServer()
		return nil, fmt.Errorf("cluster: %w", err)
	}
	c.wg.Add(3)
	go c.receive()
	go c.dispatch()
	go c.heartbeats()
	// Ask everyone for their agents now rather than at their next heartbeat.
	c.publishCtl(c.ctlSubj, "", &ctlMsg{T: "sync", Node: cfg.Node})
	ev := c.log.Info().Str("mode", c.mode()).Str("nats_link", cfg.natsProtection())
	if c.srv != nil {
		ev = ev.Str("route_links", cfg.routeProtection())
	}
	ev.Msg("joined cluster")
	return c, nil
}

func (c *Cluster) mode() string {
	if c.srv != nil {
		return "embedded"
	}
	return "external"
}

// Node is this node's id.
func (c *Cluster) Node() string { return c.cfg.Node }

// Stats returns the live counters.
func (c *Cluster) Stats() *Stats { return &c.stats }

// RouteAddr is the embedded server's route listener address (nil in
// external mode); useful with port 0.
func (c *Cluster) RouteAddr() net.Addr {
	if c.srv == nil {
		return nil
	}
	if a := c.srv.ClusterAddr(); a != nil {
		return a
	}
	return nil
}

// Routes is the number of routes the embedded server has to other nodes.
func (c *Cluster) Routes() int {
	if c.srv == nil {
		return 0
	}
	return c.srv.NumRoutes()
}

func startEmbedded(cfg Config, token string) (*server.Server, error) {
	host, portStr, _ := net.SplitHostPort(cfg.Listen)
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, configerr.New(fieldListen, "cluster: "+fieldListen+" %q: bad port", cfg.Listen)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	opts := &server.Options{
		ServerName: cfg.Node,
		// The daemon's own connection goes over an ephemeral loopback port
		// closed by a random token that only this process knows, so the
		// routes stay the only way in. (nats.InProcessServer would avoid
		// the port, but its net.Pipe hands every write over synchronously:
		// cross-node round trips ran at half the rate they do over
		// loopback TCP. The server needs a client listener anyway: it opens
		// its routes only once one is up.)
		Host:          "127.0.0.1",
		Port:          server.RANDOM_PORT,
		Authorization: token,
		MaxPayload:    MaxMessage,
		NoSigs:        true,
		Cluster: server.ClusterOpts{
			Name:     cfg.Name,
			Host:     host,
			Port:     port,
			Username: cfg.User,
			Password: cfg.Password,
		},
	}
	if conf := routeTLS(&cfg); conf != nil {
		opts.Cluster.TLSConfig = conf
		opts.Cluster.TLSTimeout = 2
	}
	for _, r := range cfg.Routes {
		u, _ := parseRoute(r)
		if cfg.User != "" && u.User == nil {
			u.User = urlUser(cfg.User, cfg.Password)
		}
		opts.Routes = append(opts.Routes, u)
	}
	// nats-server reports a route port it cannot bind only to its log and
	// then never gets ready: try the port first so that a busy one fails
	// at once, naming the reason.
	if err := portFree(host, port); err != nil {
		return nil, err
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("cluster: embedded NATS server: %w", err)
	}
	s.SetLoggerV2(newNATSLog(cfg.Logger), false, false, false)
	s.Start()
	if !s.ReadyForConnections(5 * time.Second) {
		s.Shutdown()
		if err := portFree(host, port); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("cluster: embedded NATS server did not start listening on %s", cfg.Listen)
	}
	return s, nil
}

// portFree reports whether the route listener could bind host:port (an
// error naming Config.Listen and the system's reason, e.g. "address
// already in use"). A random port is always free.
func portFree(host string, port int) error {
	if port == server.RANDOM_PORT {
		return nil
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return configerr.New(fieldListen, "cluster: "+fieldListen+" %s: %w", net.JoinHostPort(host, strconv.Itoa(port)), err)
	}
	return l.Close()
}

func (c *Cluster) shutdownServer() {
	if c.srv != nil {
		c.srv.Shutdown()
		c.srv.WaitForShutdown()
	}
}

// Close leaves the cluster: it tells the other nodes (so they end requests
// to this node's agents at once instead of after DeadAfter), closes the
// NATS connection and stops the embedded server.
func (c *Cluster) Close() {
	select {
	case <-c.done:
		return
	default:
	}
	c.publishCtl(c.ctlSubj, "", &ctlMsg{T: "bye", Node: c.cfg.Node})
	_ = c.nc.FlushTimeout(time.Second)
	close(c.done)
	c.wg.Wait()
	c.nc.Close()
	c.shutdownServer()
	c.log.Info().Msg("left cluster")
}

// Abort leaves the cluster the way a crash would: no goodbye, the NATS
// connection and the embedded server simply stop, and the other nodes notice
// by the missing heartbeats (failure drills and tests). Close after Abort
// does nothing.
func (c *Cluster) Abort() {
	select {
	case <-c.done:
		return
	default:
	}
	c.nc.Close() // first: nothing more leaves this node
	close(c.done)
	c.wg.Wait()
	c.shutdownServer()
	c.log.Warn().Msg("left cluster abruptly")
}

func (c *Cluster) nodeSubject(node string) string { return c.dest(node).subj }

// Announce publishes a local agent registration. The daemon calls it for
// every session registered on this node, after deciding a.Stamp.
func (c *Cluster) Announce(a Agent) {
	a.Node = c.cfg.Node
	a.Proof = nil
	if a.Org != "" && c.cfg.OrgKey != nil {
		if key := c.cfg.OrgKey(a.Org); key != nil {
			a.Proof = orgProof(key, c.cfg.Name, &a)
		}
	}
	c.mu.Lock()
	c.local[a.Session] = a
	c.seq++
	c.publishCtl(c.ctlSubj, "", &ctlMsg{T: "up", Node: c.cfg.Node, Seq: c.seq, Agent: &a})
	c.mu.Unlock()
}

// Withdraw publishes the end of a local agent session.
func (c *Cluster) Withdraw(a Agent) {
	a.Node = c.cfg.Node
	c.mu.Lock()
	if _, ok := c.local[a.Session]; !ok {
		c.mu.Unlock()
		return
	}
	delete(c.local, a.Session)
	c.seq++
	c.publishCtl(c.ctlSubj, "", &ctlMsg{T: "down", Node: c.cfg.Node, Seq: c.seq, Agent: &Agent{ID: a.ID, Session: a.Session, Node: a.Node}})
	c.mu.Unlock()
}

// ErrNotConnected is returned by SendRequest and SendReply while the NATS
// connection is down.
var ErrNotConnected = errors.New("cluster: not connected to NATS")

// ErrTooLarge is returned for a message larger than NATS takes: an
// external deployment's max_payload (1 MB unless raised), or MaxMessage.
var ErrTooLarge = errors.New("cluster: message larger than the NATS max_payload")

// MaxMessage is the largest cluster message the embedded NATS servers
// take: the daemon's largest frame (16 MiB, negotiate.MaxPayloadLimit)
// with room for the cluster header. NATS's own default, 1 MB, would refuse
// what the daemon accepts from an agent.
const MaxMessage = 16<<20 + 64<<10

// SendRequest publishes r to node. r.From and r.Seq are set here.
func (c *Cluster) SendRequest(node string, r *Request) error {
	r.From = c.cfg.Node
	bp := c.bufs.Get().(*[]byte)
	b, err := appendRequest((*bp)[:0], r)
	if err == nil {
		err = c.publishData(node, b, sent{kind: kindRequest, w: r.W})
	}
	*bp = b[:0]
	c.bufs.Put(bp)
	return err
}

// SendReply publishes r to node. r.From and r.Seq are set here; r.Ref,
// Delivery and Channel are remembered with it (Lost, Notice).
func (c *Cluster) SendReply(node string, r *Reply) error {
	r.From = c.cfg.Node
	bp := c.bufs.Get().(*[]byte)
	b, err := appendReply((*bp)[:0], r)
	if err == nil {
		err = c.publishData(node, b, sent{kind: kindReply, w: r.W, end: r.End, ref: r.Ref, aux: r.Delivery, aux2: r.Channel})
	}
	*bp = b[:0]
	c.bufs.Put(bp)
	return err
}

// SendNotice tells node that a reply (n.About, the reply's Seq as
// received) to its request n.W could not be delivered here (n.Code is the
// wire error code the requester got). n.From is set here.
func (c *Cluster) SendNotice(node string, n *Notice) error {
	n.From = c.cfg.Node
	b, err := appendNotice(nil, n)
	if err != nil {
		return err
	}
	return c.publishData(node, b, sent{kind: kindNotice, w: n.W, aux: n.About, ref: n.Code})
}

// SendCancel publishes a CANCEL of request w to node.
func (c *Cluster) SendCancel(node string, w uint64) error {
	b, err := appendCancel(nil, &Cancel{From: c.cfg.Node, W: w})
	if err != nil {
		return err
	}
	return c.publishData(node, b, sent{kind: kindCancel, w: w})
}

func (c *Cluster) publish(subj string, b []byte) error {
	// Publish copies b into the connection's buffer before returning. While
	// reconnecting it would buffer instead: data is better refused at once
	// (the sender gets an error) than delivered seconds late.
	if c.srv == nil && !c.nc.IsConnected() {
		c.stats.SendFailed.Add(1)
		return ErrNotConnected
	}
	if err := c.nc.Publish(subj, b); err != nil {
		if errors.Is(err, nats.ErrMaxPayload) {
			return fmt.Errorf("%w: %d bytes, max_payload %d", ErrTooLarge, len(b), c.nc.MaxPayload())
		}
		c.stats.SendFailed.Add(1)
		return fmt.Errorf("cluster: %w", err)
	}
	c.stats.Sent.Add(1)
	return nil
}

// publishCtl signs m and publishes it on subj, for node to (empty: every
// node). Counters are taken in publish order (auth.go).
func (c *Cluster) publishCtl(subj, to string, m *ctlMsg) {
	c.ctlMu.Lock()
	defer c.ctlMu.Unlock()
	c.ctlCtr++
	m.Inc, m.To, m.Ctr, m.Born, m.KX, m.Cert = c.inc, to, c.ctlCtr, c.me.born, c.me.kxPub, c.me.chain
	m.TS = time.Now().UnixMilli()
	body := marshalControl(m)
	sig, err := sign(c.me.signer, c.signed(body))
	if err == nil {
		err = c.nc.Publish(subj, appendControl(nil, body, sig))
	}
	if err != nil {
		c.log.Debug().Err(err).Str("t", m.T).Msg("control message not sent")
	}
}

// heartbeats says this node is alive every Heartbeat, with its event
// sequence so that a node that missed an event asks for a snapshot.
func (c *Cluster) heartbeats() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.Heartbeat)
	defer t.Stop()
	for {
		sent := c.lastSent() // read before publishing: what it counts went out first
		c.mu.Lock()
		c.publishCtl(c.ctlSubj, "", &ctlMsg{T: "hb", Node: c.cfg.Node, Seq: c.seq, Sent: sent})
		c.mu.Unlock()
		select {
		case <-t.C:
		case <-c.done:
			return
		}
	}
}

// dispatch is the one goroutine that reads the inbox, owns the peers table
// and calls the Handler.
func (c *Cluster) dispatch() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.Heartbeat)
	defer t.Stop()
	var (
		req Request
		rep Reply
	)
	for {
		select {
		case m := <-c.inbox:
			// What was shed on arrival is answered with an error rather
			// than delivered: the answer leaves now instead of after a
			// backlog that grows, and the headroom above the bound
			// (inboxCap) is what lets the answers be given before
			// anything is dropped.
			c.handle(m, &req, &rep)
			c.stats.InboxBytes.Add(-int64(len(m.data)))
		case now := <-t.C:
			c.checkPeers(now)
			c.forgetMembers(now)
		case <-c.done:
			for node := range c.peers {
				c.nodeDown(node, "leaving")
			}
			return
		}
	}
}

// handle takes one message from the inbox: a control message is
// authenticated, a sealed data message opened (unless take opened it
// already, shedding it), and only then decoded and handed on.
func (c *Cluster) handle(in inMsg, req *Request, rep *Reply) {
	b, m, n := in.data, in.from, in.nonce
	if len(b) == 0 {
		c.drop(DropMalformed, "")
		return
	}
	if m == nil {
		switch b[0] {
		case kindControl:
			var cm ctlMsg
			body, sig, err := decodeControl(b, &cm)
			if err != nil {
				c.drop(DropMalformed, "")
				return
			}
			if c.authControl(&cm, body, sig) {
				c.control(&cm)
			}
			return
		case kindSealed:
			var ok bool
			if b, m, n, ok = c.open(b); !ok {
				return
			}
		default:
			c.drop(DropBadSignature, "") // data that is not sealed
			return
		}
	}
	if n <= m.rxN {
		c.drop(DropReplayed, m.node)
		return
	}
	m.rxN = n
	c.handleData(b, m.node, req, rep, in.shed)
}

// handleData hands on data message b, opened from node's seal.
func (c *Cluster) handleData(b []byte, node string, req *Request, rep *Reply, shed bool) {
	if len(b) == 0 {
		c.drop(DropMalformed, node)
		return
	}
	switch b[0] {
	case kindRequest:
		if decodeRequest(b, req) != nil {
			c.drop(DropMalformed, node)
			return
		}
		if req.From != node {
			c.drop(DropForbidden, node)
			return
		}
		c.sequence(req.From, req.Seq)
		c.received(shed)
		req.Shed, req.Stranger = shed, c.peers[req.From] == nil
		if shed {
			req.Frame = nil // cut on arrival (inbox.go)
		}
		if req.Stranger {
			c.stats.Dropped[DropUnknownNode].Add(1) // answered, not delivered
		}
		c.h.Request(req)
	case kindReply:
		// A reply from a node declared dead is void: its requests were
		// answered agent_gone then.
		if c.admit(decodeReply(b, rep), node, rep.From, rep.Seq) {
			c.received(shed)
			rep.Shed = shed
			if shed {
				rep.Frame = nil
			}
			c.h.Reply(rep)
		}
	case kindCancel:
		var cn Cancel
		if c.admit(decodeCancel(b, &cn), node, cn.From, cn.Seq) {
			c.h.Cancel(&cn)
		}
	case kindNotice:
		var n Notice
		if c.admit(decodeNotice(b, &n), node, n.From, n.Seq) {
			c.noteAbout(n.From, &n)
			c.h.Notice(&n)
		}
	case kindLost, kindForgot, kindVoid:
		var g gapMsg
		if c.admit(decodeGap(b, &g), node, g.From, g.Seq) {
			switch g.Kind {
			case kindLost:
				c.answerLost(g.From, g.First, g.Last)
			case kindForgot:
				c.log.Warn().Str("peer", g.From).Msg("a node lost cluster messages to this node beyond naming: ending every request between the two nodes")
				c.h.Lost(&Lost{Kind: LostAll, Node: g.From})
			case kindVoid:
				c.voided(g.From)
				c.log.Warn().Str("peer", g.From).Msg("a node stopped hearing this node and declared it dead: ending the requests it was serving for this node")
				c.h.Lost(&Lost{Kind: LostVoid, Node: g.From})
			}
		}
	default:
		c.drop(DropMalformed, node)
	}
}

// admit reports whether a data message decoded (err) from node from,
// numbered seq, opened from node's seal, is to be handled, counting it when
// not: undecodable, speaking for another node, or from a non-member.
func (c *Cluster) admit(err error, node, from string, seq uint64) bool {
	switch {
	case err != nil:
		c.drop(DropMalformed, node)
		return false
	case from != node:
		c.drop(DropForbidden, node)
		return false
	}
	c.sequence(from, seq)
	if c.peers[from] == nil {
		c.drop(DropUnknownNode, from)
		return false
	}
	return true
}

func (c *Cluster) received(shed bool) {
	c.stats.Received.Add(1)
	if shed {
		c.stats.Shed.Add(1)
	}
}

func (c *Cluster) control(m *ctlMsg) {
	now := time.Now()
	if m.T == "bye" {
		if c.peers[m.Node] != nil {
			c.nodeDown(m.Node, "left")
		}
		return
	}
	p := c.peers[m.Node]
	if p != nil && p.inc != m.Inc {
		// Restarted under the same id: its agents, its requests and its
		// event numbers are those of a node that died.
		c.nodeDown(m.Node, "restarted")
		p = nil
	}
	if p == nil {
		p = &peer{agents: make(map[string]Agent), inc: m.Inc}
		c.peers[m.Node] = p
		c.stats.Nodes.Add(1)
		c.log.Info().Str("peer", m.Node).Msg("node joined")
		if m.T != "snap" {
			c.askSnapshot(m.Node, p, now)
		}
	}
	p.lastSeen = now
	switch m.T {
	case "sync":
		c.sendSnapshot(m.Node)
	case "hb":
		if !p.syncing && m.Seq > p.seq {
			c.askSnapshot(m.Node, p, now) // missed an event
		}
		if s, ok := m.Sent[c.cfg.Node]; ok {
			c.sentTo(m.Node, s)
		}
	case "up", "down":
		switch {
		case p.syncing || m.Seq <= p.seq:
			// Covered by the snapshot on its way, or seen already.
		case m.Seq != p.seq+1:
			c.askSnapshot(m.Node, p, now)
		default:
			p.seq = m.Seq
			a := *m.Agent
			a.Node = m.Node
			if m.T == "up" {
				if !c.mayAnnounce(&a) {
					c.drop(DropForbidden, m.Node)
					return
				}
				c.agentUp(p, a)
			} else if old, ok := p.agents[a.Session]; ok {
				delete(p.agents, a.Session)
				c.stats.RemoteAgents.Add(-1)
				c.h.AgentDown(old)
			}
		}
	case "snap":
		c.settle(m.Node, m.Sent[c.cfg.Node])
		p.syncing, p.everSynced = false, true
		p.seq = m.Seq
		keep := make(map[string]bool, len(m.Agents))
		for _, a := range m.Agents {
			a.Node = m.Node
			if !c.mayAnnounce(&a) {
				c.drop(DropForbidden, m.Node)
				continue
			}
			keep[a.Session] = true
			if _, ok := p.agents[a.Session]; !ok {
				c.agentUp(p, a)
			}
		}
		for s, a := range p.agents {
			if !keep[s] {
				delete(p.agents, s)
				c.stats.RemoteAgents.Add(-1)
				c.h.AgentDown(a)
			}
		}
	}
}

func (c *Cluster) agentUp(p *peer, a Agent) {
	if _, ok := p.agents[a.Session]; !ok {
		c.stats.RemoteAgents.Add(1)
	}
	p.agents[a.Session] = a
	c.h.AgentUp(a)
}

func (c *Cluster) askSnapshot(node string, p *peer, now time.Time) {
	p.syncing, p.syncAsked = true, now
	c.publishCtl(c.nodeSubject(node), node, &ctlMsg{T: "sync", Node: c.cfg.Node})
}

func (c *Cluster) sendSnapshot(to string) {
	c.mu.Lock()
	m := ctlMsg{T: "snap", Node: c.cfg.Node, Seq: c.seq, Agents: make([]Agent, 0, len(c.local))}
	for _, a := range c.local {
		m.Agents = append(m.Agents, a)
	}
	// Under the destination's lock, so that what it says was sent is
	// exactly what was published before it (seq.go's settle).
	d := c.lockDest(to)
	m.Sent = map[string]uint64{to: d.seq}
	c.publishCtl(d.subj, to, &m)
	d.mu.Unlock()
	c.mu.Unlock()
}

// noteHeard runs on the NATS client's goroutine for the second
// subscription to the control subject, as control messages arrive.
func (c *Cluster) noteHeard(m *nats.Msg) {
	if len(m.Data) > maxControl {
		return // counted by take
	}
	var cm ctlMsg
	body, sig, err := decodeControl(m.Data, &cm)
	if err != nil || !c.heardFrom(&cm, body, sig) {
		return // counted by the dispatcher, which sees it too
	}
	now := time.Now().UnixNano()
	if v, ok := c.heard.Load(cm.Node); ok {
		v.(*atomic.Int64).Store(now)
		return
	}
	v := new(atomic.Int64)
	v.Store(now)
	c.heard.Store(cm.Node, v)
}

// lastHeard is when node's last control message arrived, or its last
// message was handled if that is later.
func (c *Cluster) lastHeard(node string, p *peer) time.Time {
	if v, ok := c.heard.Load(node); ok {
		if t := time.Unix(0, v.(*atomic.Int64).Load()); t.After(p.lastSeen) {
			return t
		}
	}
	return p.lastSeen
}

func (c *Cluster) checkPeers(now time.Time) {
	c.heard.Range(func(k, v any) bool { // forget nodes long gone
		if _, ok := c.peers[k.(string)]; !ok && now.Sub(time.Unix(0, v.(*atomic.Int64).Load())) > 10*c.cfg.DeadAfter {
			c.heard.Delete(k)
			delete(c.rx, k.(string))
		}
		return true
	})
	for node, p := range c.peers {
		switch {
		case now.Sub(c.lastHeard(node, p)) > c.cfg.DeadAfter:
			c.nodeDown(node, whyNoHeartbeat)
		case p.syncing && now.Sub(p.syncAsked) > c.cfg.DeadAfter:
			c.askSnapshot(node, p, now) // the request or its answer was lost
		}
	}
}

// whyNoHeartbeat is nodeDown's reason for a node not heard for DeadAfter.
const whyNoHeartbeat = "no heartbeat"

func (c *Cluster) nodeDown(node, why string) {
	p := c.peers[node]
	delete(c.peers, node)
	// This node's series to it starts again (the first message, for a
	// node declared dead for silence, a void). Its series to this node is
	// kept: a node that was not dead after all goes on numbering, and a
	// restarted one starts at 1, below what is expected (seq.go).
	if d, ok := c.dests.LoadAndDelete(node); ok {
		d := d.(*dest)
		d.mu.Lock()
		d.gone = true
		d.mu.Unlock()
	}
	if why == whyNoHeartbeat {
		// It may be alive and still hear this node (a one-way partition,
		// a pause): its requests in flight here were just dropped, and it
		// would wait for them. Tell it (a new series starts with this).
		c.sendGap(kindVoid, node, 0, 0)
	}
	c.stats.Nodes.Add(-1)
	c.stats.NodesDown.Add(1)
	c.log.Warn().Str("peer", node).Str("why", why).Int("agents", len(p.agents)).Msg("node down")
	for _, a := range p.agents {
		c.stats.RemoteAgents.Add(-1)
		c.h.AgentDown(a)
	}
	c.h.NodeDown(node)
}

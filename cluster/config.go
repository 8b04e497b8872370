package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/m2md/m2md/internal/configerr"
)

// Defaults. The failure detector is a fixed timeout: a node not heard for
// DeadAfter is dead. A dead node is noticed within DefaultDeadAfter plus
// one DefaultHeartbeat (4.25 s), which keeps the promise that requests in
// flight to its agents fail over or end within 5 s, while a node that
// gets no CPU for 3 s (a long GC pause, a noisy neighbour, a SIGSTOP) and
// then resumes is not declared dead: its first heartbeat after the pause
// arrives within 3.25 s of its last. An adaptive detector (phi accrual)
// would give no such bound: after a quiet spell it suspects sooner, after
// a noisy one later, and the promise is about fixed times. The daemon's
// busy check (daemon/liveness.go) watches each agent; this watches nodes.
const (
	DefaultName      = "m2md"
	DefaultHeartbeat = 250 * time.Millisecond
	DefaultDeadAfter = 4 * time.Second
	// DefaultInbox is how many cluster messages may wait for this node's
	// dispatcher before requests and replies are answered with an error
	// instead of delivered (Config.Inbox).
	DefaultInbox = 1 << 15
	// DefaultInboxBytes is how many bytes of cluster messages may wait
	// for this node's dispatcher before requests and replies are answered
	// with an error (Config.InboxBytes): the pending bytes nats.go allows
	// a subscription by default. A healthy node's dispatcher keeps its
	// inbox near empty, so this bound bites only on a backlog: 4,000
	// messages of 16 KiB, or four of the largest, 16 MiB.
	DefaultInboxBytes = 64 << 20
	// MaxInbox bounds Config.Inbox: every node keeps a ring of twice as
	// many entries (56 bytes each) per other node (seq.go).
	MaxInbox = 1 << 20
)

// Config configures a node. Exactly one of Listen (embedded mode) and URLs
// (external mode) is set; with neither, the cluster is off and Start must not
// be called (Enabled reports it).
//
// As in daemon.Config, zero means the documented default and a negative
// number is an error. What Check and Start refuse in a Config is a
// ConfigError naming the fields qualified, as "cluster.Config.Listen", so
// that a command can name its flags instead.
type Config struct {
	// Listen is the host:port of the embedded NATS server's route listener.
	// Embedded mode.
	Listen string
	// Routes are the other nodes' route URLs, nats://host:port. A node may
	// list itself; a node with no routes
	// waits for the others to connect to it.
	Routes []string
	// User and Password authenticate the embedded routes: every node must
	// use the same.
	// Without them the route port accepts any process that can reach it,
	// so Start refuses a non-loopback Listen without them.
	User, Password string
	// Cert is this node's certificate and private key (LoadIdentity reads
	// them), issued by the cluster CA (m2md cert node); its
	// Subject CommonName is the node id. In embedded mode it is the routes'
	// TLS certificate, as server and as client.
	Cert *tls.Certificate
	// CA is the cluster CA: every other node's
	// certificate must chain to it. In embedded mode both ends of a route
	// verify the other's certificate against it (mutual TLS).
	CA *x509.CertPool

	// URLs are the client URLs of an existing NATS deployment.
	// External mode.
	URLs []string
	// CredsFile is a NATS credentials file, NkeyFile a file holding an nkey
	// seed, and CAFile a PEM bundle trusted for the NATS servers'
	// certificates. Beyond
	// loopback, Start requires TLS (a tls:// URL or CAFile) and CredsFile
	// or NkeyFile: both prove the node's identity by signing the server's
	// challenge, so an observer of the connection learns nothing to replay.
	CredsFile, NkeyFile, CAFile string

	// Name is the NATS cluster name and the subject prefix; every node of
	// one cluster must use the same. Default "m2md".
	Name string
	// Node is this node's id on the cluster (subject-safe: [A-Za-z0-9_-]).
	// Default: the CommonName of Cert; without Cert, a random id, new at
	// every start, so a restarted node is a new node to the others.
	Node string
	// Heartbeat is how often the node says it is alive; DeadAfter is how
	// long without a heartbeat before the others declare it dead and end
	// the requests in flight to its agents. Defaults 250 ms and 4 s;
	// negative is an error.
	Heartbeat, DeadAfter time.Duration
	// Inbox bounds the messages waiting for this node's dispatcher, at
	// most MaxInbox. A request or reply that finds Inbox
	// messages waiting is not delivered: the request's requester (on its
	// node) gets an error, as does the requester a reply was for, and the
	// reply's provider a NOTICE. Control messages are never shed. Default
	// 32,768; negative is an error.
	Inbox int
	// InboxBytes bounds the bytes of the messages waiting for this node's
	// dispatcher likewise: a request or reply that
	// finds InboxBytes bytes waiting is shed as at the Inbox bound, and
	// its frame let go at once (inbox.go). Default 64 MiB; negative is an
	// error.
	InboxBytes int
	// Headroom is how many more messages NATS may hold for the dispatcher
	// beyond Inbox, room in which it answers what it sheds. Beyond
	// Inbox+Headroom NATS drops messages (slow consumer); their senders
	// learn it from the sequence numbers and answer them (seq.go). Every
	// node remembers that many messages it sent to each other node, so
	// every node of a cluster should use the same Inbox and Headroom.
	// Default max(Inbox, 4,096); negative is an error.
	Headroom int

	// OrgKey returns the key (OrgAnnounceKey of the org's secret) with
	// which this node proves, and checks, that an announced agent of org is
	// announced by a node holding the org's secret; nil for an org this
	// node has no secret for, whose agents from other nodes it refuses.
	// Nil (daemons without org secrets): only agents of the open namespace
	// are taken.
	OrgKey func(org string) []byte

	// Logger receives structured logs (never payloads or secrets).
	Logger zerolog.Logger
}

// ConfigError is the error for a Config value out of its range or in
// conflict with another (errors.As finds it). Field names the setting at
// fault, qualified as "cluster.Config.Listen"; every other field its message
// names is written the same way. A link another machine could join or read
// wraps ErrInsecure as well.
type ConfigError = configerr.Error

// Qualified names of the fields errors name.
const (
	fieldListen     = "cluster.Config.Listen"
	fieldRoutes     = "cluster.Config.Routes"
	fieldUser       = "cluster.Config.User"
	fieldPassword   = "cluster.Config.Password"
	fieldCert       = "cluster.Config.Cert"
	fieldCA         = "cluster.Config.CA"
	fieldURLs       = "cluster.Config.URLs"
	fieldCredsFile  = "cluster.Config.CredsFile"
	fieldNkeyFile   = "cluster.Config.NkeyFile"
	fieldCAFile     = "cluster.Config.CAFile"
	fieldNode       = "cluster.Config.Node"
	fieldInbox      = "cluster.Config.Inbox"
	fieldInboxBytes = "cluster.Config.InboxBytes"
)

// Enabled reports whether cfg asks for a cluster at all.
func (c Config) Enabled() bool { return c.Listen != "" || len(c.URLs) > 0 }

// touched reports whether any cluster setting is given, so that a setting
// without Listen or URLs is reported rather than ignored.
func (c Config) touched() bool {
	return c.Enabled() || len(c.Routes) > 0 || c.User != "" || c.Password != "" || c.Cert != nil || c.CA != nil ||
		c.CredsFile != "" || c.NkeyFile != "" || c.CAFile != ""
}

// Check reports what is wrong with cfg (a ConfigError naming the fields)
// without starting anything. A Config with no cluster setting at all (a
// single node) is fine.
func (c Config) Check() error {
	if !c.touched() {
		return nil
	}
	_, err := c.withDefaults()
	return err
}

func (c Config) withDefaults() (Config, error) {
	if c.Listen != "" && len(c.URLs) > 0 {
		return c, configerr.New(fieldListen, "cluster: "+fieldListen+" (embedded NATS) and "+fieldURLs+" (external NATS) exclude each other; choose one")
	}
	if !c.Enabled() {
		return c, configerr.New(fieldListen, "cluster: cluster settings given without "+fieldListen+" (embedded NATS) or "+fieldURLs+" (external NATS)")
	}
	if len(c.Routes) > 0 && c.Listen == "" {
		return c, configerr.New(fieldRoutes, "cluster: "+fieldRoutes+" needs "+fieldListen)
	}
	if c.Name == "" {
		c.Name = DefaultName
	}
	if !subjectSafe(c.Name) {
		return c, configerr.New("cluster.Config.Name", "cluster: cluster.Config.Name %q: use letters, digits, '-' and '_' only", c.Name)
	}
	if c.Cert != nil && len(c.Cert.Certificate) > 0 {
		// The certificate names the node (auth.go): its id follows it, and
		// another id would have every other node refuse this one's messages.
		leaf, err := x509.ParseCertificate(c.Cert.Certificate[0])
		if err != nil {
			return c, configerr.New(fieldCert, "cluster: "+fieldCert+": %w", err)
		}
		switch cn := leaf.Subject.CommonName; {
		case c.Node == "":
			c.Node = cn
		case c.Node != cn:
			return c, configerr.New(fieldNode, "cluster: "+fieldNode+" %q is not the CommonName %q of "+fieldCert+": the other nodes know a node by its certificate; drop "+fieldNode+" or issue the certificate for it (m2md cert node --name %s)", c.Node, cn, c.Node)
		}
	}
	if c.Node == "" {
		c.Node = randomID()
	}
	if !subjectSafe(c.Node) {
		return c, configerr.New(fieldNode, "cluster: "+fieldNode+" %q: use letters, digits, '-' and '_' only", c.Node)
	}
	for _, d := range []struct {
		field string
		p     *time.Duration
		def   time.Duration
	}{{"cluster.Config.Heartbeat", &c.Heartbeat, DefaultHeartbeat}, {"cluster.Config.DeadAfter", &c.DeadAfter, DefaultDeadAfter}} {
		if err := configerr.OrDefault(d.field, d.p, d.def); err != nil {
			return c, fmt.Errorf("cluster: %w", err)
		}
	}
	if c.DeadAfter < 2*c.Heartbeat {
		return c, configerr.New("cluster.Config.DeadAfter", "cluster: cluster.Config.DeadAfter %v must be at least two heartbeats (%v)", c.DeadAfter, 2*c.Heartbeat)
	}
	switch {
	case c.Inbox < 0 || c.Inbox > MaxInbox:
		return c, configerr.New(fieldInbox, "cluster: "+fieldInbox+" %d: want 1 to %d messages", c.Inbox, MaxInbox)
	case c.Inbox == 0:
		c.Inbox = DefaultInbox
	}
	switch {
	case c.InboxBytes < 0:
		return c, configerr.New(fieldInboxBytes, "cluster: "+fieldInboxBytes+" %d: want a size above 0, like 64MiB", c.InboxBytes)
	case c.InboxBytes == 0:
		c.InboxBytes = DefaultInboxBytes
	}
	if err := configerr.OrDefault("cluster.Config.Headroom", &c.Headroom, max(c.Inbox, 4096)); err != nil {
		return c, fmt.Errorf("cluster: %w", err)
	}
	if (c.User == "") != (c.Password == "") {
		return c, configerr.New(fieldUser, "cluster: set both "+fieldUser+" and "+fieldPassword+", or neither")
	}
	if err := c.checkLinks(); err != nil {
		return c, err
	}
	return c, nil
}

func parseRoute(s string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil || u.Host == "" || (u.Scheme != "nats" && u.Scheme != "nats-route" && u.Scheme != "tls") {
		return nil, configerr.New(fieldRoutes, "cluster: "+fieldRoutes+" entry %q: want nats://host:port", redact(s))
	}
	if _, p, err := net.SplitHostPort(u.Host); err != nil {
		return nil, configerr.New(fieldRoutes, "cluster: "+fieldRoutes+" entry %q: %w", redact(s), err)
	} else if _, err := strconv.Atoi(p); err != nil {
		return nil, configerr.New(fieldRoutes, "cluster: "+fieldRoutes+" entry %q: port %q", redact(s), p)
	}
	return u, nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func subjectSafe(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ValidNodeID reports whether s can be a node id (Config.Node, and the
// CommonName of a node certificate): 1 to 64 of [A-Za-z0-9_-].
func ValidNodeID(s string) bool { return subjectSafe(s) }

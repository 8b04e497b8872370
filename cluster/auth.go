package cluster

import (
	"bytes"
	"crypto"
	"crypto/cipher"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"fmt"
	"math/big"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/m2md/m2md/internal/configerr"
	"github.com/m2md/m2md/security"
)

// Message authentication: no cluster message is taken on the word of the
// network that carried it.
//
// Every node has a certificate whose Subject CommonName is its node id
// (Config.Cert; without one, an ephemeral self-signed one made at Start)
// and, per start, an X25519 key pair. Every control message carries the
// certificate chain, the X25519 public key, the incarnation and when it
// began (born), the time it was sent (ts), a counter (ctr, from 1 at every
// start) and the node it is for ("to", empty for every node), and is signed
// with the certificate's key. A receiver takes it only if the chain verifies
// against Config.CA (any certificate without a CA: loopback only), the
// CommonName is the node id the message claims, the signature verifies, ts
// is within ctlWindow of its own clock, the counter is above the last it
// took from that incarnation, and - for an incarnation it has not seen -
// born is later than that of the incarnation it knows and not in the
// future. The first message of an incarnation verifies the chain (after
// its signature: a forgery costs one verification) and sets the counter;
// the ones after it are checked against the certificate then taken, the
// counter first (one signature verification each, none for a replay). An
// identity forgotten (forgetMembers) leaves its counters behind, so that
// the same incarnation heard again takes nothing it took before.
//
// From the two nodes' X25519 keys each pair of incarnations derives one
// key per direction (HKDF-SHA256 over the X25519 secret, bound to the
// cluster name, both node ids and both incarnations). Every data message
// (request, reply, cancel, notice, lost, forgot, void) is sealed under the
// key of its direction with ChaCha20-Poly1305: encrypted, so that what
// crosses NATS is opaque to anyone without the pair's keys, and
// authenticated with the sender's header as associated data. The nonce is
// a counter the sender raises for every message it seals (to any node), so
// it never repeats under a key, and the receiver takes each pair's
// counters strictly increasing: a data message is taken at most once, and
// never after a later one.
//
// A node speaks only for itself: the node id in a sealed message's header
// picks the key, and the message inside must name the same node. An agent
// announcement of an org carries a MAC under a key derived from the org's
// secret (Config.OrgKey): a node without the secret cannot announce an
// agent of that org, and a receiver that has no key for the org refuses it.

// ctlWindow is how far a control message's ts may be from the receiver's
// clock: the window in which a captured control message could be shown to
// a node that never took its counter (one that was not listening). Clocks
// of the cluster's machines must agree to within it.
const ctlWindow = 30 * time.Second

// memberHorizon is how long a node's identity is kept after its last
// authenticated control message: longer than ctlWindow, so that whatever
// it signed before is outside the window when it is forgotten.
const memberHorizon = 2 * ctlWindow

// maxChain bounds the certificates a control message may carry.
const maxChain = 4

// ctlDomain starts every signed control message: a signature made for
// anything else never verifies as one.
const ctlDomain = "m2md/cluster/v1/control\x00"

// self is this node's identity, fixed at Start.
type self struct {
	signer crypto.Signer
	chain  [][]byte // DER, leaf first
	kx     *security.KeyPair
	kxPub  []byte
	born   int64 // unix nanoseconds: when this incarnation began
}

// member is another node's authenticated identity: one incarnation of it.
// Replaced (never changed) when a later incarnation is taken; its counters
// are the only fields written after.
type member struct {
	node string
	inc  string
	born int64
	leaf []byte // DER of its certificate
	pub  crypto.PublicKey
	// tx seals what this node sends it, rx opens what it sends this node.
	tx, rx cipher.AEAD
	ctr    uint64 // the last control counter taken (dispatcher only)
	rxN    uint64 // the last data nonce taken (dispatcher only)
	// heardCtr is the last control counter noteHeard took; lastAuth is
	// when a control message of it was last taken (unix nanoseconds).
	heardCtr, lastAuth atomic.Int64
}

// DropReason is why a cluster message was dropped without an answer.
type DropReason uint8

// Drop reasons; every one is counted (Stats.Dropped) and logged at a
// bounded rate, and none reaches the Handler.
const (
	// DropMalformed: the message does not decode.
	DropMalformed DropReason = iota
	// DropUnknownNode: from a node with no authenticated identity here, or
	// a data message from a node that is not (or no longer) a member.
	DropUnknownNode
	// DropBadSignature: a control message whose signature does not verify,
	// a data message whose seal does not open, or one not sealed at all.
	DropBadSignature
	// DropBadCertificate: a certificate that does not chain to the CA, is
	// expired, or names another node.
	DropBadCertificate
	// DropReplayed: a counter at or below one already taken.
	DropReplayed
	// DropStale: a control message outside ctlWindow, or of an incarnation
	// older than the one known.
	DropStale
	// DropForbidden: a node speaking for another node, or announcing an
	// agent of an org it cannot prove it has the secret of.
	DropForbidden
	numDropReasons
)

var dropNames = [numDropReasons]string{"malformed", "unknown_node", "bad_signature", "bad_certificate", "replayed", "stale", "forbidden"}

func (r DropReason) String() string {
	if r < numDropReasons {
		return dropNames[r]
	}
	return "drop(" + strconv.Itoa(int(r)) + ")"
}

// DropReasons lists every reason, for metrics that must show each from the
// start.
func DropReasons() []DropReason {
	rs := make([]DropReason, numDropReasons)
	for i := range rs {
		rs[i] = DropReason(i)
	}
	return rs
}

// drop counts a message dropped for why and logs it, at most once a
// second: forged traffic comes at the rate an attacker chooses, and the
// counter has it all.
func (c *Cluster) drop(why DropReason, node string) {
	c.stats.Dropped[why].Add(1)
	now := time.Now().UnixNano()
	last := c.dropLogged.Load()
	if now-last < int64(time.Second) || !c.dropLogged.CompareAndSwap(last, now) {
		return
	}
	c.log.Warn().Str("reason", why.String()).Str("claimed_node", node).Uint64("dropped_total", c.stats.Dropped[why].Load()).
		Msg("cluster message dropped: it is not what a member of this cluster would send")
}

// newSelf makes this node's identity: Config.Cert, or an ephemeral
// self-signed certificate naming the node when there is none.
func newSelf(cfg *Config) (*self, error) {
	s := &self{born: time.Now().UnixNano()}
	cert := cfg.Cert
	if cert == nil {
		var err error
		if cert, err = ephemeralCert(cfg.Node); err != nil {
			return nil, err
		}
	}
	signer, ok := cert.PrivateKey.(crypto.Signer)
	if !ok || len(cert.Certificate) == 0 {
		return nil, configerr.New(fieldCert, "cluster: "+fieldCert+" has no private key that can sign")
	}
	if len(cert.Certificate) > maxChain {
		return nil, configerr.New(fieldCert, "cluster: "+fieldCert+" holds %d certificates, at most %d", len(cert.Certificate), maxChain)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, configerr.New(fieldCert, "cluster: "+fieldCert+": %w", err)
	}
	if leaf.Subject.CommonName != cfg.Node {
		return nil, configerr.New(fieldNode, "cluster: the certificate of "+fieldCert+" names node %q, but this node's id ("+fieldNode+") is %q: they must be the same", leaf.Subject.CommonName, cfg.Node)
	}
	s.signer, s.chain = signer, cert.Certificate
	if s.kx, err = security.GenerateKeyPair(); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	pub := s.kx.PublicKey()
	s.kxPub = pub[:]
	return s, nil
}

// ephemeralCert is a self-signed Ed25519 certificate naming node, for a
// cluster without a CA: it proves nothing to a node that does not already
// trust it, but keeps one code path.
func ephemeralCert(node string) (*tls.Certificate, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("cluster: node key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("cluster: node key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: node},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		return nil, fmt.Errorf("cluster: node certificate: %w", err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}, nil
}

// signed is what a control message's signature covers.
func (c *Cluster) signed(body []byte) []byte {
	b := make([]byte, 0, len(ctlDomain)+len(c.cfg.Name)+1+len(body))
	b = append(append(append(append(b, ctlDomain...), c.cfg.Name...), 0), body...)
	return b
}

func sign(s crypto.Signer, msg []byte) ([]byte, error) {
	if _, ok := s.Public().(ed25519.PublicKey); ok {
		return s.Sign(rand.Reader, msg, crypto.Hash(0))
	}
	d := sha256.Sum256(msg)
	if _, ok := s.Public().(*rsa.PublicKey); ok {
		return s.Sign(rand.Reader, d[:], &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash, Hash: crypto.SHA256})
	}
	return s.Sign(rand.Reader, d[:], crypto.SHA256)
}

func verify(pub crypto.PublicKey, msg, sig []byte) bool {
	switch k := pub.(type) {
	case ed25519.PublicKey:
		return ed25519.Verify(k, msg, sig)
	case *ecdsa.PublicKey:
		d := sha256.Sum256(msg)
		return ecdsa.VerifyASN1(k, d[:], sig)
	case *rsa.PublicKey:
		d := sha256.Sum256(msg)
		return rsa.VerifyPSS(k, crypto.SHA256, d[:], sig, &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash}) == nil
	}
	return false
}

// member returns node's authenticated identity, or nil.
func (c *Cluster) member(node string) *member {
	if v, ok := c.members.Load(node); ok {
		return v.(*member)
	}
	return nil
}

// authControl reports whether control message m (body signed by sig) is
// taken (dispatcher only), counting it when not; it installs the identity
// of an incarnation first heard.
func (c *Cluster) authControl(m *ctlMsg, body, sig []byte) bool {
	if m.Node == c.cfg.Node || (m.To != "" && m.To != c.cfg.Node) {
		c.drop(DropForbidden, m.Node) // NoEcho: this node never hears itself
		return false
	}
	now := time.Now()
	if d := now.Sub(time.UnixMilli(m.TS)); d > ctlWindow || d < -ctlWindow {
		c.drop(DropStale, m.Node)
		return false
	}
	msg := c.signed(body)
	mem := c.member(m.Node)
	// The cheap checks come first: a replayed or forged message must cost
	// a map lookup, not a signature verification.
	if mem != nil && mem.inc == m.Inc {
		switch {
		case !bytes.Equal(mem.leaf, m.Cert[0]):
			c.drop(DropBadCertificate, m.Node)
		case m.Ctr <= mem.ctr:
			c.drop(DropReplayed, m.Node)
		case !verify(mem.pub, msg, sig):
			c.drop(DropBadSignature, m.Node)
		default:
			mem.ctr = m.Ctr
			mem.lastAuth.Store(now.UnixNano())
			return true
		}
		return false
	}
	if mem != nil && m.Born <= mem.born {
		c.drop(DropStale, m.Node) // an older incarnation than the one known
		return false
	}
	if m.Born > now.Add(ctlWindow).UnixNano() {
		// Born in the future would make every later incarnation of the
		// node look older than this one.
		c.drop(DropStale, m.Node)
		return false
	}
	f, wasForgotten := c.forgotten[m.Node]
	if wasForgotten {
		switch {
		case m.Inc == f.inc && m.Ctr <= f.ctr:
			c.drop(DropReplayed, m.Node)
			return false
		case m.Inc != f.inc && m.Born <= f.born:
			c.drop(DropStale, m.Node)
			return false
		}
	}
	// The leaf's signature before its chain: a forgery that copies a
	// node's public certificate fails at one verification, not a chain
	// build.
	leaf, err := c.parseLeaf(m.Node, m.Cert[0])
	if err != nil {
		c.drop(DropBadCertificate, m.Node)
		return false
	}
	if !verify(leaf.PublicKey, msg, sig) {
		c.drop(DropBadSignature, m.Node)
		return false
	}
	if err := c.verifyChain(leaf, m.Cert, now); err != nil {
		c.drop(DropBadCertificate, m.Node)
		return false
	}
	nm, err := c.newMember(m, leaf)
	if err != nil {
		c.drop(DropMalformed, m.Node)
		return false
	}
	// The message taken is the incarnation's first: its counter is the
	// floor for the next, here and in noteHeard.
	nm.ctr = m.Ctr
	nm.heardCtr.Store(int64(m.Ctr))
	if wasForgotten && f.inc == m.Inc {
		// The same incarnation again derives the same pair keys: its data
		// counter goes on from where it was, or every captured message of
		// the pair would be taken a second time.
		nm.rxN = f.rxN
	}
	delete(c.forgotten, m.Node) // the member now holds what it held
	nm.lastAuth.Store(now.UnixNano())
	c.members.Store(nm.node, nm)
	return true
}

// parseLeaf returns the certificate der if it names node.
func (c *Cluster) parseLeaf(node string, der []byte) (*x509.Certificate, error) {
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	if leaf.Subject.CommonName != node {
		return nil, fmt.Errorf("certificate names %q", leaf.Subject.CommonName)
	}
	return leaf, nil
}

// verifyChain checks that leaf (chain[0]) chains to Config.CA through the
// rest of chain (anything, without a CA).
func (c *Cluster) verifyChain(leaf *x509.Certificate, chain [][]byte, now time.Time) error {
	if c.cfg.CA == nil {
		return nil
	}
	inter := x509.NewCertPool()
	for _, der := range chain[1:] {
		ic, err := x509.ParseCertificate(der)
		if err != nil {
			return err
		}
		inter.AddCert(ic)
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: c.cfg.CA, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err
}

// newMember derives the pair's keys with the node of m.
func (c *Cluster) newMember(m *ctlMsg, leaf *x509.Certificate) (*member, error) {
	shared, err := c.me.kx.SharedSecret(m.KX)
	if err != nil {
		return nil, err
	}
	defer shared.Wipe()
	nm := &member{node: m.Node, inc: m.Inc, born: m.Born, leaf: bytes.Clone(m.Cert[0]), pub: leaf.PublicKey}
	if nm.tx, err = c.pairKey(shared[:], c.cfg.Node, c.inc, m.Node, m.Inc); err != nil {
		return nil, err
	}
	if nm.rx, err = c.pairKey(shared[:], m.Node, m.Inc, c.cfg.Node, c.inc); err != nil {
		return nil, err
	}
	return nm, nil
}

// pairKey is the AEAD of the data from node from (incarnation fromInc) to
// node to (toInc).
func (c *Cluster) pairKey(shared []byte, from, fromInc, to, toInc string) (cipher.AEAD, error) {
	k, err := security.DeriveKey(shared, "m2md/cluster/v1/data/"+c.cfg.Name+"/"+from+"/"+fromInc+"/"+to+"/"+toInc)
	if err != nil {
		return nil, err
	}
	defer k.Wipe()
	return chacha20poly1305.New(k[:])
}

// heardFrom reports whether control message m, as noteHeard sees it, is
// authentic news from a known incarnation of its node (NATS client
// goroutine): forged heartbeats must not keep a dead node alive.
func (c *Cluster) heardFrom(m *ctlMsg, body, sig []byte) bool {
	if m.To != "" && m.To != c.cfg.Node {
		return false // another node's, copied here: not news of its sender
	}
	mem := c.member(m.Node)
	if mem == nil || mem.inc != m.Inc || !bytes.Equal(mem.leaf, m.Cert[0]) || int64(m.Ctr) <= mem.heardCtr.Load() {
		return false
	}
	if d := time.Since(time.UnixMilli(m.TS)); d > ctlWindow || d < -ctlWindow {
		return false
	}
	if !verify(mem.pub, c.signed(body), sig) {
		return false
	}
	for {
		last := mem.heardCtr.Load()
		if int64(m.Ctr) <= last {
			return false
		}
		if mem.heardCtr.CompareAndSwap(last, int64(m.Ctr)) {
			return true
		}
	}
}

// maxForgotten bounds the counters kept of forgotten identities: one per
// node id that presented a valid certificate, so what fills it is what the
// CA issued (or, without a CA, what loopback trusts anyway).
const maxForgotten = 4096

// forgotten is what is kept of an identity forgetMembers let go: enough
// to refuse what it sent before if the same incarnation is heard again.
type forgotten struct {
	inc      string
	born     int64
	ctr, rxN uint64
	forgotAt int64
}

// forgetMembers drops the identities of nodes that are not members and
// have sent nothing authentic for memberHorizon, keeping their counters
// (dispatcher only).
func (c *Cluster) forgetMembers(now time.Time) {
	c.members.Range(func(k, v any) bool {
		mem := v.(*member)
		if _, ok := c.peers[k.(string)]; ok || now.Sub(time.Unix(0, mem.lastAuth.Load())) <= memberHorizon {
			return true
		}
		if c.forgotten == nil {
			c.forgotten = make(map[string]forgotten)
		}
		if _, ok := c.forgotten[mem.node]; !ok && len(c.forgotten) >= maxForgotten {
			c.evictForgotten()
		}
		ctr := mem.ctr
		if h := uint64(mem.heardCtr.Load()); h > ctr {
			ctr = h
		}
		c.forgotten[mem.node] = forgotten{inc: mem.inc, born: mem.born, ctr: ctr, rxN: mem.rxN, forgotAt: now.UnixNano()}
		c.members.Delete(k)
		return true
	})
}

// evictForgotten makes room in the full table by letting go of the entry
// forgotten longest ago.
func (c *Cluster) evictForgotten() {
	var oldest string
	var at int64
	for node, f := range c.forgotten {
		if oldest == "" || f.forgotAt < at {
			oldest, at = node, f.forgotAt
		}
	}
	delete(c.forgotten, oldest)
}

// Sealed data messages:
//
//	sealed: 0x09 | nonce u64 | len u8 | from node | ChaCha20-Poly1305(inner) (16-byte tag)
//
// inner is one of the data messages of wire.go, naming the same node.
// The AEAD's nonce is 4 zero bytes and the nonce field; its associated data
// is everything before the ciphertext.
const kindSealed = 0x09

// seal appends inner sealed for m to dst (the nonce is the next of this
// node's counter).
func (c *Cluster) seal(dst []byte, m *member, inner []byte) []byte {
	n := c.nonces.Add(1)
	start := len(dst)
	dst = append(dst, kindSealed)
	dst = binary.BigEndian.AppendUint64(dst, n)
	dst = append(dst, byte(len(c.cfg.Node)))
	dst = append(dst, c.cfg.Node...)
	var nonce [chacha20poly1305.NonceSize]byte
	binary.BigEndian.PutUint64(nonce[4:], n)
	return m.tx.Seal(dst, nonce[:], inner, dst[start:])
}

// open opens sealed message b in place, returning the inner message, its
// sender and its nonce; it counts what it refuses. b is written to.
func (c *Cluster) open(b []byte) (inner []byte, m *member, n uint64, ok bool) {
	if len(b) < 10 || b[0] != kindSealed {
		c.drop(DropMalformed, "")
		return nil, nil, 0, false
	}
	n = binary.BigEndian.Uint64(b[1:9])
	from, rest, err := readStr(b[9:])
	if err != nil || len(rest) < chacha20poly1305.Overhead+1 || n == 0 {
		c.drop(DropMalformed, "")
		return nil, nil, 0, false
	}
	if m = c.member(from); m == nil {
		c.drop(DropUnknownNode, from)
		return nil, nil, 0, false
	}
	var nonce [chacha20poly1305.NonceSize]byte
	binary.BigEndian.PutUint64(nonce[4:], n)
	head := b[:len(b)-len(rest)]
	inner, err = m.rx.Open(rest[:0], nonce[:], rest, head)
	if err != nil {
		c.drop(DropBadSignature, m.node)
		return nil, nil, 0, false
	}
	return inner, m, n, true
}

// orgProof is the MAC that shows a's node holds the secret of a's org.
func orgProof(key []byte, name string, a *Agent) []byte {
	h := hmac.New(sha256.New, key)
	for _, s := range [...]string{"m2md/cluster/v1/agent", name, a.Node, a.Org, a.ID, a.Session} {
		var l [2]byte
		binary.BigEndian.PutUint16(l[:], uint16(len(s)))
		h.Write(l[:])
		h.Write([]byte(s))
	}
	return h.Sum(nil)
}

// OrgAnnounceKey derives, from an org's master secret, the key with which
// a node proves that an agent it announces is of that org
// (Config.OrgKey).
func OrgAnnounceKey(master []byte, org string) (security.Key, error) {
	return security.DeriveKey(master, "m2md/cluster/v1/announce/"+org)
}

// mayAnnounce reports whether node may announce a (a.Node is node): an
// agent of the open namespace, or of an org whose key this node has and
// whose proof a carries.
func (c *Cluster) mayAnnounce(a *Agent) bool {
	if a.Org == "" {
		return true
	}
	if c.cfg.OrgKey == nil {
		return false
	}
	key := c.cfg.OrgKey(a.Org)
	return key != nil && hmac.Equal(a.Proof, orgProof(key, c.cfg.Name, a))
}

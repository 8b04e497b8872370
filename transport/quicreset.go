package transport

import (
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"time"

	"github.com/quic-go/quic-go"
)

// quicConnIDLen is the length of the connection IDs the daemon gives its
// QUIC peers, the longest QUIC allows: a peer's smallest packet (a lone
// keep-alive PING) is then larger than the smallest packet quic-go answers
// with a stateless reset, so that a daemon restarted on the same address
// tells an agent its old connection is gone the first time the agent
// sends anything, where it would otherwise wait out its idle timeout.
const quicConnIDLen = 20

// statelessResetKey is the key of the stateless reset tokens (RFC 9000
// §10.3) of a listener serving tlsConf's certificate: derived from the
// certificate's private key, so that the same daemon restarted (crashed,
// killed, upgraded) can reset the connections its predecessor held. A
// listener without a static certificate gets a random key, which resets
// nothing across restarts. Two daemons sharing a certificate share the
// key: one could reset connections of the other if a peer's packets were
// routed to it, which only a path that moves flows between them does.
func statelessResetKey(tlsConf *tls.Config) *quic.StatelessResetKey {
	var key quic.StatelessResetKey
	if len(tlsConf.Certificates) > 0 {
		if der, err := x509.MarshalPKCS8PrivateKey(tlsConf.Certificates[0].PrivateKey); err == nil {
			if k, err := hkdf.Key(sha256.New, der, nil, "m2md quic stateless reset", len(key)); err == nil {
				copy(key[:], k)
				return &key
			}
		}
	}
	_, _ = rand.Read(key[:])
	return &key
}

// resetProbe is what the dialing side sends every Config.KeepAlive when
// the daemon accepts QUIC DATAGRAM frames (RFC 9221): its packet (1 + 20 +
// 2 + 6 + 16 bytes) is larger than the smallest one a restarted daemon
// answers with a stateless reset, which a bare keep-alive PING (41 bytes)
// is not. Its content means nothing; the receiver discards it.
var resetProbe = []byte{0, 0, 0, 0}

// datagrams discards the datagrams the peer sends (so that quic-go's
// queue of them never holds memory) and, on the dialing side, sends
// resetProbe every KeepAlive, until the connection ends.
func (c *quicConn) datagrams() {
	defer c.wg.Done()
	if c.isClient && c.qc.ConnectionState().SupportsDatagrams.Remote {
		c.wg.Add(1)
		go c.probe()
	}
	for {
		if _, err := c.qc.ReceiveDatagram(c.ctx); err != nil {
			return
		}
	}
}

func (c *quicConn) probe() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.KeepAlive)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if err := c.qc.SendDatagram(resetProbe); err != nil {
				return
			}
		case <-c.ctx.Done():
			return
		case <-c.qc.Context().Done():
			return
		}
	}
}

package integration

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/security"
)

var testMaster = []byte("0123456789abcdef0123456789abcdef") // org "acme"

// agentKey is what the org hands agent: HKDF(master, "m2m/v1/acme/agent").
func agentKey(t testing.TB, master []byte, org, agent string) []byte {
	t.Helper()
	k, err := security.AgentKey(master, org, agent)
	if err != nil {
		t.Fatal(err)
	}
	return k[:]
}

// TestHandshakeModesAndAuth establishes sessions in every security mode,
// with and without org authentication, on both transports, checks what
// ACCEPT grants, and proves the frame keys match by routing a request and
// its reply between two such sessions.
func TestHandshakeModesAndAuth(t *testing.T) {
	for _, auth := range []bool{false, true} {
		d := startDaemon(t, func(c *daemon.Config) {
			if auth {
				c.OrgSecrets = map[string]security.Secret{"acme": testMaster}
			}
		})
		for _, mode := range modes {
			for _, tr := range transports {
				t.Run(fmt.Sprintf("auth=%t/%s/%s", auth, mode, tr), func(t *testing.T) {
					cc := func(id string, models ...string) negotiate.ClientConfig {
						c := negotiate.ClientConfig{AgentID: id, Security: mode, Models: models}
						if auth {
							c.Org, c.AgentKey = "acme", agentKey(t, testMaster, "acme", id)
						}
						return c
					}
					suffix := fmt.Sprintf("-%t-%s-%s", auth, mode, tr)
					prov := mustDialRaw(t, d, tr, cc("prov"+suffix, "gpt-4o"))
					req := mustDialRaw(t, d, tr, cc("req"+suffix))
					for _, a := range []*rawAgent{prov, req} {
						p := a.sess.Params
						if p.SecurityMode != mode || p.Authenticated != auth || !negotiate.ValidSessionID(a.sess.ID) {
							t.Fatalf("ACCEPT: mode %s authenticated %t id %q", p.SecurityMode, p.Authenticated, a.sess.ID)
						}
						if auth && a.sess.Org != "acme" {
							t.Fatalf("session org %q", a.sess.Org)
						}
					}
					if prov.sess.ID == req.sess.ID {
						t.Fatal("two sessions share an id")
					}
					roundTrip(t, req, prov)
				})
			}
		}
	}
}

// TestHandshakeAuthRefusals covers every way authentication fails: each is
// REJECT SECURITY_POLICY with the message docs/protocol.md §3.3 gives (the
// one shared message for every failure that could tell a prober whether an
// org exists), and each is counted.
func TestHandshakeAuthRefusals(t *testing.T) {
	d := startDaemon(t, func(c *daemon.Config) {
		c.OrgSecrets = map[string]security.Secret{"acme": testMaster}
	})
	otherMaster := bytes.Repeat([]byte{7}, 32)
	cases := []struct {
		name  string
		hello func(t *testing.T, id string) []byte
		// shared: a failure a prober must not tell apart from the others
		// (unknown org, wrong key), so it carries the one shared message.
		shared bool
	}{
		{"missing proof", func(t *testing.T, id string) []byte {
			return helloBytes(t, negotiate.ClientConfig{AgentID: id}, time.Now())
		}, false},
		{"wrong key", func(t *testing.T, id string) []byte {
			return helloBytes(t, negotiate.ClientConfig{AgentID: id, Org: "acme", AgentKey: agentKey(t, otherMaster, "acme", id)}, time.Now())
		}, true},
		{"key of another agent", func(t *testing.T, id string) []byte {
			return helloBytes(t, negotiate.ClientConfig{AgentID: id, Org: "acme", AgentKey: agentKey(t, testMaster, "acme", "someone-else")}, time.Now())
		}, true},
		{"unknown org", func(t *testing.T, id string) []byte {
			return helloBytes(t, negotiate.ClientConfig{AgentID: id, Org: "globex", AgentKey: agentKey(t, testMaster, "globex", id)}, time.Now())
		}, true},
		{"stale timestamp", func(t *testing.T, id string) []byte {
			return helloBytes(t, negotiate.ClientConfig{AgentID: id, Org: "acme", AgentKey: agentKey(t, testMaster, "acme", id)}, time.Now().Add(-6*time.Minute))
		}, false},
		// Security review finding 2: the proof covers the whole HELLO, so
		// an on-path downgrade of the requested mode is refused.
		{"mode rewritten after signing", func(t *testing.T, id string) []byte {
			h := helloBytes(t, negotiate.ClientConfig{AgentID: id, Org: "acme", AgentKey: agentKey(t, testMaster, "acme", id), Security: frame.SecurityAEAD}, time.Now())
			return replaceOnce(t, h, `"mode":"aead"`, `"mode":"none"`)
		}, true},
		{"models rewritten after signing", func(t *testing.T, id string) []byte {
			h := helloBytes(t, negotiate.ClientConfig{AgentID: id, Org: "acme", AgentKey: agentKey(t, testMaster, "acme", id), Models: []string{"gpt-4o"}}, time.Now())
			return replaceOnce(t, h, `"models":["gpt-4o"]`, `"models":["gpt-4p"]`)
		}, true},
		{"agent id swapped after signing", func(t *testing.T, id string) []byte {
			h := helloBytes(t, negotiate.ClientConfig{AgentID: id, Org: "acme", AgentKey: agentKey(t, testMaster, "acme", id)}, time.Now())
			return replaceOnce(t, h, `"agent_id":"`+id+`"`, `"agent_id":"`+id+`x"`)
		}, true},
	}
	for _, tr := range transports {
		for _, tc := range cases {
			t.Run(tr+"/"+tc.name, func(t *testing.T) {
				before := metric(t, d, "m2md_handshake_failures_total", "transport="+tr, "reason=security_policy")
				conn := dialConn(t, d, tr)
				cm := exchange(t, conn, tc.hello(t, "agent-"+tr))
				if tc.shared && cm.Reject != nil && cm.Reject.Message != "authentication failed" {
					t.Errorf("message %q, want the shared %q", cm.Reject.Message, "authentication failed")
				}
				if own := ownAuthMessage[tc.name]; !tc.shared && cm.Reject != nil && cm.Reject.Message != own {
					t.Errorf("message %q, want %q (protocol.md §3.3)", cm.Reject.Message, own)
				}
				expectReject(t, conn, cm, negotiate.RejectSecurityPolicy)
				waitMetric(t, d, before+1, "m2md_handshake_failures_total", "transport="+tr, "reason=security_policy")
			})
		}
		t.Run(tr+"/replayed HELLO", func(t *testing.T) {
			id := "replayer-" + tr
			hello := helloBytes(t, negotiate.ClientConfig{AgentID: id, Org: "acme", AgentKey: agentKey(t, testMaster, "acme", id)}, time.Now())
			first := dialConn(t, d, tr)
			if cm := exchange(t, first, hello); cm.Type != negotiate.TypeAccept || !cm.Capabilities.Negotiated.Authenticated {
				t.Fatalf("first use of the HELLO: %s %+v", cm.Type, cm.Reject)
			}
			second := dialConn(t, d, tr)
			cm := exchange(t, second, hello)
			if cm.Reject != nil && cm.Reject.Message != "HELLO replayed" {
				t.Errorf("message %q, want %q (protocol.md §3.3)", cm.Reject.Message, "HELLO replayed")
			}
			expectReject(t, second, cm, negotiate.RejectSecurityPolicy)
		})
	}
}

// ownAuthMessage: the authentication failures that tell nothing about an
// org's existence (they are decided before the org is looked up) have
// messages of their own, as docs/protocol.md §3.3 lists them.
var ownAuthMessage = map[string]string{
	"missing proof":   "agent authentication required",
	"stale timestamp": "HELLO timestamp is more than 5m0s from the daemon's clock",
}

// TestHandshakeAuthDowngradeRefusedByClient: an agent holding a key refuses
// the ACCEPT of a daemon that does not authenticate (it never confirms).
func TestHandshakeAuthDowngradeRefusedByClient(t *testing.T) {
	d := startDaemon(t, nil)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			_, err := dialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "keyed-" + tr, Org: "acme", AgentKey: agentKey(t, testMaster, "acme", "keyed-"+tr)})
			if !errors.Is(err, negotiate.ErrAuthDowngrade) {
				t.Fatalf("dial: %v, want ErrAuthDowngrade", err)
			}
		})
	}
}

// TestAcceptConfirmation: the client verifies the daemon's key confirmation
// in every mode, authenticated or not (security review finding 3). The real
// daemon's ACCEPT passes; the same ACCEPT changed on the path (a timer, or
// just whitespace) is refused with ErrBadConfirmation.
func TestAcceptConfirmation(t *testing.T) {
	for _, auth := range []bool{false, true} {
		d := startDaemon(t, func(c *daemon.Config) {
			if auth {
				c.OrgSecrets = map[string]security.Secret{"acme": testMaster}
			}
		})
		for _, mode := range modes {
			for name, tamper := range map[string]func([]byte) []byte{
				"untouched": func(b []byte) []byte { return b },
				"timer": func(b []byte) []byte {
					return bytes.Replace(b, []byte(`"ping_interval_ms":`), []byte(`"ping_interval_ms":1`), 1)
				},
				"whitespace": func(b []byte) []byte { return append(bytes.Clone(b[:len(b)-1]), ' ', '}') },
			} {
				t.Run(fmt.Sprintf("auth=%t/%s/%s", auth, mode, name), func(t *testing.T) {
					id := fmt.Sprintf("confirm-%t-%s-%s", auth, mode, name)
					cc := negotiate.ClientConfig{AgentID: id, Security: mode}
					if auth {
						cc.Org, cc.AgentKey = "acme", agentKey(t, testMaster, "acme", id)
					}
					hs, err := negotiate.NewHello(cc, time.Now())
					if err != nil {
						t.Fatal(err)
					}
					conn := dialConn(t, d, "ws")
					reply := rawExchange(t, conn, hs.Message())
					sess, err := hs.Accept(tamper(reply))
					if name == "untouched" {
						if err != nil || sess.Params.Authenticated != auth {
							t.Fatalf("real ACCEPT refused: %v", err)
						}
						return
					}
					if !errors.Is(err, negotiate.ErrBadConfirmation) {
						t.Fatalf("ACCEPT changed in transit: %v, want ErrBadConfirmation", err)
					}
				})
			}
		}
	}
}

// TestRejectCodes reaches every REJECT code of docs/protocol.md §3.3 and
// checks each is counted in m2md_handshake_failures_total{reason}.
func TestRejectCodes(t *testing.T) {
	type tc struct {
		name string
		cfg  func(*daemon.Config)
		// setup may establish sessions first (capacity, replay cache).
		setup func(t *testing.T, d *testDaemon, tr string)
		first func(t *testing.T, tr string) []byte
		code  negotiate.RejectCode
	}
	plainHello := func(id string) func(t *testing.T, tr string) []byte {
		return func(t *testing.T, tr string) []byte {
			return helloBytes(t, negotiate.ClientConfig{AgentID: id + "-" + tr}, time.Now())
		}
	}
	authHello := func(id string) func(t *testing.T, tr string) []byte {
		return func(t *testing.T, tr string) []byte {
			id := id + "-" + tr
			return helloBytes(t, negotiate.ClientConfig{AgentID: id, Org: "acme", AgentKey: agentKey(t, testMaster, "acme", id)}, time.Now())
		}
	}
	withAuth := func(c *daemon.Config) { c.OrgSecrets = map[string]security.Secret{"acme": testMaster} }
	cases := []tc{
		{name: "version 4.0", first: func(t *testing.T, tr string) []byte {
			return replaceOnce(t, plainHello("v4")(t, tr), `"version":"3.0"`, `"version":"4.0"`)
		}, code: negotiate.RejectVersionMismatch},
		{name: "version 03.0", first: func(t *testing.T, tr string) []byte {
			return replaceOnce(t, plainHello("v03")(t, tr), `"version":"3.0"`, `"version":"03.0"`)
		}, code: negotiate.RejectVersionMismatch},
		{name: "only unknown algorithms", first: func(t *testing.T, tr string) []byte {
			return replaceOnce(t, plainHello("brotli")(t, tr), `"algorithms":["m2m","tokennative"]`, `"algorithms":["brotli","none"]`)
		}, code: negotiate.RejectNoCommonAlgorithm},
		{name: "tokennative with hmac", first: func(t *testing.T, tr string) []byte {
			return helloBytes(t, negotiate.ClientConfig{AgentID: "tn-" + tr, Security: frame.SecurityHMAC,
				Algorithms: []negotiate.Algorithm{negotiate.AlgorithmTokenNative}}, time.Now())
		}, code: negotiate.RejectNoCommonAlgorithm},
		{name: "mode below minimum", cfg: func(c *daemon.Config) { c.MinSecurity = frame.SecurityAEAD }, first: func(t *testing.T, tr string) []byte {
			return helloBytes(t, negotiate.ClientConfig{AgentID: "weak-" + tr, Security: frame.SecurityHMAC}, time.Now())
		}, code: negotiate.RejectSecurityPolicy},
		{name: "missing proof", cfg: withAuth, first: plainHello("noproof"), code: negotiate.RejectSecurityPolicy},
		{name: "bad proof", cfg: withAuth, first: func(t *testing.T, tr string) []byte {
			id := "badproof-" + tr
			return helloBytes(t, negotiate.ClientConfig{AgentID: id, Org: "acme", AgentKey: agentKey(t, bytes.Repeat([]byte{1}, 32), "acme", id)}, time.Now())
		}, code: negotiate.RejectSecurityPolicy},
		{name: "low-order public key", first: func(t *testing.T, tr string) []byte {
			h := plainHello("loworder")(t, tr)
			cm, err := negotiate.ParseControl(h)
			if err != nil {
				t.Fatal(err)
			}
			cm.Capabilities.Security.PublicKey = make([]byte, 32) // the all-zero point
			out, err := negotiate.AppendControl(nil, cm)
			if err != nil {
				t.Fatal(err)
			}
			return out
		}, code: negotiate.RejectSecurityPolicy},
		{name: "server busy", cfg: func(c *daemon.Config) { c.MaxSessions = 1 },
			setup: func(t *testing.T, d *testDaemon, tr string) {
				mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "occupant-" + tr})
			},
			first: plainHello("second"), code: negotiate.RejectServerBusy},
		{name: "bad proof at capacity", cfg: func(c *daemon.Config) { withAuth(c); c.MaxSessions = 1 },
			// Capacity is checked last: an unauthenticated peer learns
			// nothing about the load.
			setup: func(t *testing.T, d *testDaemon, tr string) {
				id := "occupant-" + tr
				mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: id, Org: "acme", AgentKey: agentKey(t, testMaster, "acme", id)})
			},
			first: func(t *testing.T, tr string) []byte {
				id := "prober-" + tr
				return helloBytes(t, negotiate.ClientConfig{AgentID: id, Org: "acme", AgentKey: agentKey(t, bytes.Repeat([]byte{3}, 32), "acme", id)}, time.Now())
			}, code: negotiate.RejectSecurityPolicy},
		{name: "replay cache full", cfg: func(c *daemon.Config) { withAuth(c); c.ReplayCacheSize = 1 },
			setup: func(t *testing.T, d *testDaemon, tr string) {
				id := "first-" + tr
				mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: id, Org: "acme", AgentKey: agentKey(t, testMaster, "acme", id)})
			},
			first: authHello("second"), code: negotiate.RejectRateLimited},
		{name: "garbage", first: func(*testing.T, string) []byte { return []byte{0x07, 'h', 'i'} }, code: negotiate.RejectUnknown},
		{name: "DATA first", first: func(t *testing.T, _ string) []byte {
			m, err := negotiate.AppendData(nil, 0, 1, "", encode(t, corpus(t, "req-chat-tiny-07.json")))
			if err != nil {
				t.Fatal(err)
			}
			return m
		}, code: negotiate.RejectUnknown},
		{name: "PING first", first: func(*testing.T, string) []byte {
			return negotiate.AppendPing(nil, "sess_AAAAAAAAAAAAAAAAAAAA", time.Now())
		}, code: negotiate.RejectUnknown},
		{name: "truncated HELLO", first: func(t *testing.T, tr string) []byte {
			h := plainHello("trunc")(t, tr)
			return h[:len(h)/2]
		}, code: negotiate.RejectUnknown},
		{name: "HELLO without mode", first: func(t *testing.T, tr string) []byte {
			return replaceOnce(t, plainHello("rust")(t, tr), `"mode":"none",`, ``)
		}, code: negotiate.RejectUnknown},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, tr := range transports {
				t.Run(tr, func(t *testing.T) {
					d := startDaemon(t, c.cfg) // fresh: capacity and replay cache are per daemon
					if c.setup != nil {
						c.setup(t, d, tr)
					}
					conn := dialConn(t, d, tr)
					expectReject(t, conn, exchange(t, conn, c.first(t, tr)), c.code)
					waitMetric(t, d, 1, "m2md_handshake_failures_total", "transport="+tr, "reason="+strings.ToLower(string(c.code)))
				})
			}
		})
	}
}

// TestServerBusyFreesWithSession: the session limit counts live sessions,
// so a slot is usable again once its session ends.
func TestServerBusyFreesWithSession(t *testing.T) {
	d := startDaemon(t, func(c *daemon.Config) { c.MaxSessions = 1 })
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			waitSessions(t, d, 0) // the previous subtest's last session is gone
			a := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "slot-" + tr})
			a.sendControl(negotiate.AppendClose(nil, a.sess.ID, time.Now(), negotiate.ReasonNormal, "bye"))
			a.expectControl(5*time.Second, negotiate.TypeClose)
			expectConnClosed(t, a.conn, 5*time.Second)
			deadline := time.Now().Add(5 * time.Second)
			for {
				b, err := dialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "next-" + tr})
				if err == nil {
					b.conn.Close()
					break
				}
				if !errors.Is(err, negotiate.ErrServerBusy) || time.Now().After(deadline) {
					t.Fatalf("dial after the only session ended: %v", err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// TestHelloTimeout: a connection that never says HELLO is closed after
// HelloTimeout and counted.
func TestHelloTimeout(t *testing.T) {
	d := startDaemon(t, func(c *daemon.Config) { c.HelloTimeout = 300 * time.Millisecond })
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			conn := dialConn(t, d, tr)
			start := time.Now()
			expectConnClosed(t, conn, 5*time.Second)
			if el := time.Since(start); el > 3*time.Second {
				t.Fatalf("closed after %v", el)
			}
			waitMetric(t, d, 1, "m2md_handshake_failures_total", "transport="+tr, "reason=no_hello")
		})
	}
}

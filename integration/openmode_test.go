package integration

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/security"
)

// TestOpenModeReplacementPolicy: without org secrets anybody can claim any
// agent id, so a newer session replaces the holder only from the holder's
// source address; from another address it is refused with REJECT
// SECURITY_POLICY and the holder keeps its traffic (security review finding
// 12). With org secrets the newcomer proved the agent key, and the newest
// session wins from anywhere. The two source addresses are 127.0.0.1 (the
// WebSocket listener) and ::1 (the QUIC listener).
func TestOpenModeReplacementPolicy(t *testing.T) {
	for _, auth := range []bool{false, true} {
		t.Run(fmt.Sprintf("auth=%t", auth), func(t *testing.T) {
			d := startDaemon(t, func(c *daemon.Config) {
				c.QUICAddr = "[::1]:0"
				if auth {
					c.OrgSecrets = map[string]security.Secret{"acme": testMaster}
				}
			})
			cc := func(id string, models ...string) negotiate.ClientConfig {
				c := negotiate.ClientConfig{AgentID: id, Models: models}
				if auth {
					c.Org, c.AgentKey = "acme", agentKey(t, testMaster, "acme", id)
				}
				return c
			}
			holder := mustDialRaw(t, d, "ws", cc("alice", "gpt-4o"))
			req := mustDialRaw(t, d, "ws", cc("req"))

			// The same id from ::1 over QUIC.
			before := metric(t, d, "m2md_handshake_failures_total", "transport=quic", "reason=security_policy")
			other, err := dialRaw(t, d, "quic", cc("alice", "gpt-4o"))
			if auth {
				if err != nil {
					t.Fatalf("authenticated newcomer from another address: %v", err)
				}
				holder.expectClose(5*time.Second, negotiate.ReasonReplaced)
				roundTrip(t, req, other)
				return
			}
			var rej *negotiate.RejectError
			if !errors.As(err, &rej) || rej.Code != negotiate.RejectSecurityPolicy {
				t.Fatalf("open mode, same id from another address: %v, want REJECT SECURITY_POLICY", err)
			}
			waitMetric(t, d, before+1, "m2md_handshake_failures_total", "transport=quic", "reason=security_policy")
			// The holder was not told anything and still gets its traffic.
			roundTrip(t, req, holder)

			// From the holder's own address the newest session wins.
			again := mustDialRaw(t, d, "ws", cc("alice", "gpt-4o"))
			holder.expectClose(5*time.Second, negotiate.ReasonReplaced)
			roundTrip(t, req, again)
		})
	}
}

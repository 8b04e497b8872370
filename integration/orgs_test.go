package integration

import (
	"bytes"
	"testing"
	"time"

	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/security"
)

// TestOrgsAreSeparate: an identity is (org, agent id). An agent of org
// evil that authenticates as "alice" neither replaces acme's alice nor
// receives acme's traffic, and no request crosses orgs, by agent id or by
// model (security review finding 1).
func TestOrgsAreSeparate(t *testing.T) {
	evilMaster := bytes.Repeat([]byte{0xe5}, 32)
	d := startDaemon(t, func(c *daemon.Config) {
		c.OrgSecrets = map[string]security.Secret{"acme": testMaster, "evil": evilMaster}
	})
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			cc := func(org string, master []byte, id string, models ...string) negotiate.ClientConfig {
				return negotiate.ClientConfig{AgentID: id, Org: org, AgentKey: agentKey(t, master, org, id), Models: models}
			}
			alice := "alice-" + tr
			acmeAlice := mustDialRaw(t, d, tr, cc("acme", testMaster, alice, "acme-model-"+tr))
			acmeReq := mustDialRaw(t, d, tr, cc("acme", testMaster, "req-"+tr))
			evilAlice := mustDialRaw(t, d, tr, cc("evil", evilMaster, alice, "evil-model-"+tr))
			evilReq := mustDialRaw(t, d, tr, cc("evil", evilMaster, "req-"+tr))
			acmeBob := mustDialRaw(t, d, tr, cc("acme", testMaster, "bob-"+tr))

			// Same agent id in another org: no CLOSE REPLACED, both stay.
			acmeAlice.expectSilence(200 * time.Millisecond)
			if !d.SessionOpen(acmeAlice.sess.ID) || !d.SessionOpen(evilAlice.sess.ID) {
				t.Fatal("a session of one org replaced the same agent id of another")
			}
			// Addressing by id stays in the requester's org, both ways.
			roundTrip(t, acmeReq, acmeAlice)
			roundTrip(t, evilReq, evilAlice)
			// No route by model or by id into another org.
			_, byModel := evilReq.request("", []byte(`{"model":"acme-model-`+tr+`","messages":[{"role":"user","content":"hi"}]}`))
			evilReq.expectError(5*time.Second, byModel, "no_route", false)
			_, byID := evilReq.request(acmeBob.sess.AgentID, corpus(t, "req-chat-tiny-07.json"))
			evilReq.expectError(5*time.Second, byID, "unknown_agent", false)
			acmeBob.expectSilence(100 * time.Millisecond)
			acmeAlice.expectSilence(100 * time.Millisecond)
		})
	}
}

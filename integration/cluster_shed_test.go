package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/m2md/m2md/cluster"
	"github.com/m2md/m2md/negotiate"
)

// TestClusterReplyRefusedNotice: a reply the requester's node cannot
// deliver (here: larger than the requester's max_payload) ends the request
// there with the error, and the provider on the other node gets the NOTICE
// for its delivery, as it would next to the requester, whether the reply
// was a chunk (its later chunks are dropped) or its final reply.
func TestClusterReplyRefusedNotice(t *testing.T) {
	nodes := startCluster(t, 2, nil, nil)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			prov := mustDialRaw(t, nodes[1], tr, negotiate.ClientConfig{AgentID: "rnprov-" + tr})
			req := mustDialRaw(t, nodes[0], tr, negotiate.ClientConfig{AgentID: "rnreq-" + tr, MaxPayload: 1024})
			waitAgentAt(t, nodes[0], "", prov.sess.AgentID, nodes[1])
			_, id := req.request(prov.sess.AgentID, corpus(t, "req-stream-01.json"))
			got := prov.recvData(5 * time.Second)
			prov.reply(got.ch, got.hdr.RequestID, false, chunk("s", 0))
			if r := req.recvData(5 * time.Second); r.hdr.RequestID != id || !bytes.Equal(r.body, chunk("s", 0)) {
				t.Fatalf("first chunk: id %d body %.60q", r.hdr.RequestID, r.body)
			}
			prov.reply(got.ch, got.hdr.RequestID, false, incompressible(t, 4096))
			req.expectError(5*time.Second, id, string(negotiate.CodeTooLarge), false)
			prov.expectError(5*time.Second, got.hdr.RequestID, string(negotiate.CodeTooLarge), true)
			prov.reply(got.ch, got.hdr.RequestID, true, chunk("s", 2))
			req.expectSilence(100 * time.Millisecond)

			// A final reply refused: the delivery is over on the provider's
			// node already, and its NOTICE comes all the same.
			_, id = req.request(prov.sess.AgentID, corpus(t, "req-chat-1k-01.json"))
			got = prov.recvData(5 * time.Second)
			prov.reply(got.ch, got.hdr.RequestID, true, incompressible(t, 4096))
			req.expectError(5*time.Second, id, string(negotiate.CodeTooLarge), false)
			if n := prov.expectError(5*time.Second, got.hdr.RequestID, string(negotiate.CodeTooLarge), true); n.ch != got.ch {
				t.Errorf("NOTICE of the final reply on channel %d, the reply came on %d", n.ch, got.ch)
			}
			req.expectSilence(100 * time.Millisecond)
		})
	}
}

// incompressible is a JSON document of about n bytes that Brotli cannot
// shrink.
func incompressible(t testing.TB, n int) []byte {
	b := make([]byte, n*3/4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Appendf(nil, `{"data":%q}`, base64.StdEncoding.EncodeToString(b))
}

// TestClusterShed: at-most-once with errors across nodes. With a cluster
// inbox of one message, bursts of requests (shed at the provider's node)
// and of stream chunks (shed at the requester's node) overflow it: every
// request still ends exactly once, with its reply or with queue_full, a
// stream's chunks arrive in order up to its error, the provider of a shed
// chunk gets the NOTICE, and each node counts what it shed while NATS drops
// nothing.
func TestClusterShed(t *testing.T) {
	// DeadAfter is long: on a loaded machine the nodes must not declare
	// each other dead (agent_gone) while this test floods them.
	nodes := startCluster(t, 2, func(c *cluster.Config) { c.Inbox, c.DeadAfter = 1, 10*time.Second }, nil)
	prov := mustDialRaw(t, nodes[1], "ws", negotiate.ClientConfig{AgentID: "shprov"})
	req := mustDialRaw(t, nodes[0], "ws", negotiate.ClientConfig{AgentID: "shreq"})
	waitAgentAt(t, nodes[0], "", prov.sess.AgentID, nodes[1])
	body := corpus(t, "req-chat-1k-01.json")

	// Bursts of requests; the provider answers what it gets.
	provDone, stop := answerEach(t, prov, body)
	shed := 0
	for round := 0; round < 20 && shed == 0; round++ {
		_, failed := burstEnds(t, req, prov.sess.AgentID, body, 32, provDone)
		shed += failed
	}
	close(stop)
	if err := <-provDone; err != nil {
		t.Fatal(err)
	}
	if shed == 0 {
		t.Fatal("20 bursts of 32 requests and nothing shed with an inbox of 1")
	}

	// Streams: chunks in order, then either END or queue_full (and the
	// provider's NOTICE).
	const chunks = 200
	stopped := false
	for round := 0; round < 10 && !stopped; round++ {
		_, id := req.request(prov.sess.AgentID, corpus(t, "req-stream-01.json"))
		dl := nextRequest(t, prov, 2*time.Second)
		if dl == nil {
			// The stream's request itself was shed at the provider's node
			// (a heartbeat can fill an inbox of one): it ends with
			// queue_full, and the next round tries again.
			if r := req.recvData(5 * time.Second); r.hdr.RequestID != id || r.code != string(negotiate.CodeQueueFull) || !r.hdr.IsEnd() {
				t.Fatalf("round %d: the provider got no request, and the requester got id %d code %q end %v", round, r.hdr.RequestID, r.code, r.hdr.IsEnd())
			}
			continue
		}
		for k := range chunks {
			prov.reply(dl.ch, dl.hdr.RequestID, k == chunks-1, chunk("x", k))
		}
		for k := 0; ; k++ {
			r := req.recvData(5 * time.Second)
			if r.hdr.RequestID != id {
				t.Fatalf("round %d: reply to %d, want %d", round, r.hdr.RequestID, id)
			}
			if r.code == string(negotiate.CodeQueueFull) && r.hdr.IsEnd() {
				stopped = true
				// The stream's NOTICE, after any NOTICEs of the bursts'
				// replies still on their way.
				for {
					n := prov.recvData(5 * time.Second)
					if n.code != string(negotiate.CodeQueueFull) || n.hdr.Flags != negotiate.FlagReply|negotiate.FlagEnd|negotiate.FlagNotice {
						t.Fatalf("provider: code %q flags %v, want queue_full NOTICEs", n.code, n.hdr.Flags)
					}
					if n.hdr.RequestID == dl.hdr.RequestID {
						break
					}
				}
				break
			}
			if !bytes.Equal(r.body, chunk("x", k)) || r.hdr.IsEnd() != (k == chunks-1) {
				t.Fatalf("round %d: chunk %d: end %v code %q body %.60q", round, k, r.hdr.IsEnd(), r.code, r.body)
			}
			if r.hdr.IsEnd() {
				break
			}
		}
	}
	if !stopped {
		t.Fatal("10 streams of 200 chunks and no chunk shed with an inbox of 1")
	}
	for _, d := range nodes {
		if n := metric(t, d, "m2md_cluster_dropped_total", "reason=slow_consumer"); n != 0 {
			t.Errorf("node %s: NATS dropped %v messages unanswered", d.Cluster().Node, n)
		}
	}
	if n := metric(t, nodes[0], "m2md_cluster_dropped_total", "reason=inbox_full") + metric(t, nodes[1], "m2md_cluster_dropped_total", "reason=inbox_full"); n < float64(shed+1) {
		t.Errorf("nodes counted %v shed messages, want at least %d", n, shed+1)
	}
}

// nextRequest returns the next request prov receives within timeout, nil
// if none comes. It passes over the queue_full NOTICEs of replies shed at
// the requester's node, which earlier bursts leave behind.
func nextRequest(t *testing.T, prov *rawAgent, timeout time.Duration) *received {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r, _, err := prov.recv(time.Until(deadline))
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			return nil
		case errors.Is(err, errControl):
			continue
		case err != nil:
			t.Fatalf("provider: %v", err)
		case !r.hdr.IsReply():
			return r
		case r.code != string(negotiate.CodeQueueFull):
			t.Fatalf("the provider got a reply-flagged message with code %q, want a queue_full NOTICE or a request", r.code)
		}
	}
}

// answerEach runs prov as a provider that answers every request with one
// final reply of body (and every PING) until stop is closed; its error, or
// nil, comes on done.
func answerEach(t *testing.T, prov *rawAgent, body []byte) (done chan error, stop chan struct{}) {
	done, stop = make(chan error, 1), make(chan struct{})
	fr := encode(t, body)
	go func() {
		for {
			r, cm, err := prov.recv(100 * time.Millisecond)
			switch {
			case errors.Is(err, errControl):
				if cm.Type == negotiate.TypePing {
					prov.sendControl(negotiate.AppendPong(nil, prov.sess.ID, time.Now()))
				}
			case errors.Is(err, context.DeadlineExceeded):
			case err != nil:
				done <- err
				return
			case !r.hdr.IsReply():
				if err := prov.send(r.ch, negotiate.FlagReply|negotiate.FlagEnd, r.hdr.RequestID, "", prov.protect(r.ch, fr)); err != nil {
					done <- err
					return
				}
			}
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
		}
	}()
	return done, stop
}

// burstEnds sends n requests of body to provider and checks that each
// ends exactly once, with one final reply or queue_full; it returns how
// many ended each way. provDone fails the test if the provider stops.
func burstEnds(t *testing.T, req *rawAgent, provider string, body []byte, n int, provDone chan error) (ok, queueFull int) {
	t.Helper()
	want := map[uint64]bool{}
	// One write for the whole burst: the requests reach the other node
	// back to back, as a real burst does, instead of paced by one system
	// call each, which a fast dispatcher could keep up with.
	req.conn.Cork()
	for range n {
		_, id := req.request(provider, body)
		want[id] = true
	}
	if err := req.conn.Uncork(); err != nil {
		t.Fatalf("sending the burst: %v", err)
	}
	for len(want) > 0 {
		select {
		case err := <-provDone:
			t.Fatalf("the provider stopped answering: %v", err)
		default:
		}
		r := req.recvData(10 * time.Second)
		if !want[r.hdr.RequestID] || !r.hdr.IsEnd() {
			t.Fatalf("id %d end %v: not one final answer per request", r.hdr.RequestID, r.hdr.IsEnd())
		}
		delete(want, r.hdr.RequestID)
		switch r.code {
		case "":
			ok++
		case string(negotiate.CodeQueueFull):
			queueFull++
		default:
			t.Fatalf("request %d: error %q", r.hdr.RequestID, r.code)
		}
	}
	return ok, queueFull
}

package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
)

// TestBusyProviderVanished: with default settings, a provider holding a
// request whose machine vanishes (a relay black-holes its traffic both
// ways: no FIN, no RST, no QUIC CONNECTION_CLOSE) is noticed by the busy
// liveness check, and its requester gets agent_gone within 5 s, on both
// transports. Before the check, QUIC took the 30 s idle timeout and
// WebSocket the 90 s keepalive.
func TestBusyProviderVanished(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			d := startDaemon(t, nil)
			path := newFaultPath(t, d, tr)
			prov := path.dialRaw(t, d, negotiate.ClientConfig{AgentID: "vanish-prov", Models: []string{"gpt-4o"}})
			req := mustDialRaw(t, d, "ws", negotiate.ClientConfig{AgentID: "vanish-req"})
			_, id := req.request("", corpus(t, "req-chat-tiny-07.json"))
			prov.recvDataAnswering(10 * time.Second)
			start := time.Now()
			path.dark(true)
			r := req.recvDataAnswering(30 * time.Second)
			el := time.Since(start)
			t.Logf("%s: agent_gone %v after the provider vanished", tr, el)
			if r.code != "agent_gone" || r.hdr.RequestID != id || !r.hdr.IsEnd() {
				t.Fatalf("got code %q for request %d, want agent_gone for %d", r.code, r.hdr.RequestID, id)
			}
			if el > 5*time.Second {
				t.Fatalf("agent_gone after %v, want within 5 s", el)
			}
			waitMetric(t, d, 1, "m2md_sessions_closed_total", "reason=timeout")
			path.dark(false) // so that the agent's cleanup need not wait out a closing handshake
		})
	}
}

// TestSlowProviderNotDead: a provider whose model takes longer than the
// liveness check's whole bound to answer, but whose reader answers PING,
// keeps its session and delivers its answer.
func TestSlowProviderNotDead(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			d := startDaemon(t, fastLiveness)
			prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "slow-prov", Models: []string{"gpt-4o"}})
			req := mustDialRaw(t, d, "ws", negotiate.ClientConfig{AgentID: "slow-req"})
			_, id := req.request("", corpus(t, "req-chat-tiny-07.json"))
			dl := prov.recvDataAnswering(10 * time.Second)
			// Think for four times the check's bound, answering PINGs.
			pings := 0
			for end := time.Now().Add(4 * (busyPingAfter + busyPongTimeout)); time.Now().Before(end); {
				if _, cm, err := prov.recvOrPong(time.Until(end)); err == nil && cm != nil && cm.Type == negotiate.TypePing {
					pings++
				}
			}
			if pings == 0 {
				t.Fatal("the daemon never PINGed a silent provider holding a request")
			}
			prov.reply(dl.ch, dl.hdr.RequestID, true, corpus(t, "resp-chat-01.json"))
			r := req.recvDataAnswering(10 * time.Second)
			if r.code != "" || r.hdr.RequestID != id || !r.hdr.IsEnd() {
				t.Fatalf("got code %q for request %d, want the answer to %d", r.code, r.hdr.RequestID, id)
			}
			if n := metric(t, d, "m2md_sessions_closed_total", "reason=timeout"); n != 0 {
				t.Fatalf("%v sessions closed for silence", n)
			}
		})
	}
}

// TestFailoverBeforeFirstByte: a request whose provider is lost before it
// replied is delivered to another provider of the model and answered
// there; the requester sees only the answer. After a reply it ends with
// agent_gone saying how much was delivered, and a request marked ONCE is
// never delivered twice.
func TestFailoverBeforeFirstByte(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lose   func(p *rawAgent, path *faultPath)
		reason string
	}{
		{"killed", func(p *rawAgent, _ *faultPath) { p.conn.Close() }, "disconnected"},
		{"vanished", func(_ *rawAgent, path *faultPath) { path.dark(true) }, "unresponsive"},
	} {
		for _, tr := range transports {
			t.Run(tc.name+"/"+tr, func(t *testing.T) {
				t.Parallel()
				d := startDaemon(t, fastLiveness)
				path := newFaultPath(t, d, tr)
				first := path.dialRaw(t, d, negotiate.ClientConfig{AgentID: "fo-first", Models: []string{"gpt-4o"}})
				req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "fo-req"})
				ch, id := req.request("", corpus(t, "req-chat-1k-01.json"))
				dl := first.recvDataAnswering(10 * time.Second)
				second := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "fo-second", Models: []string{"gpt-4o"}})
				tc.lose(first, path)
				again := second.recvDataAnswering(10 * time.Second)
				if string(again.body) != string(dl.body) || again.peer != "fo-req" || again.hdr.IsReply() {
					t.Fatalf("second provider got %q from %q, want the request from fo-req", again.body, again.peer)
				}
				second.reply(again.ch, again.hdr.RequestID, true, corpus(t, "resp-chat-01.json"))
				r := req.recvDataAnswering(10 * time.Second)
				if r.code != "" || r.hdr.RequestID != id || r.ch != ch || !r.hdr.IsEnd() || r.peer != "fo-second" {
					t.Fatalf("requester got code %q for request %d from %q", r.code, r.hdr.RequestID, r.peer)
				}
				req.expectSilence(100 * time.Millisecond)
				waitMetric(t, d, 1, "m2md_failovers_total", "reason="+tc.reason)
				path.dark(false)
			})
		}
	}
	t.Run("after first byte", func(t *testing.T) {
		t.Parallel()
		d := startDaemon(t, fastLiveness)
		first := mustDialRaw(t, d, "ws", negotiate.ClientConfig{AgentID: "fb-first", Models: []string{"gpt-4o"}})
		req := mustDialRaw(t, d, "ws", negotiate.ClientConfig{AgentID: "fb-req"})
		_, id := req.request("", corpus(t, "req-stream-01.json"))
		dl := first.recvDataAnswering(10 * time.Second)
		second := mustDialRaw(t, d, "ws", negotiate.ClientConfig{AgentID: "fb-second", Models: []string{"gpt-4o"}})
		first.reply(dl.ch, dl.hdr.RequestID, false, chunk("fb", 0))
		if r := req.recvDataAnswering(10 * time.Second); r.code != "" || r.hdr.IsEnd() {
			t.Fatalf("first chunk: code %q flags %v", r.code, r.hdr.Flags)
		}
		first.conn.Close()
		r := req.expectError(10*time.Second, id, "agent_gone", false)
		if !strings.Contains(string(r.body), "after 1 of its replies") {
			t.Fatalf("agent_gone message %s does not say how much was delivered", r.body)
		}
		second.expectSilence(200 * time.Millisecond)
		if n := metric(t, d, "m2md_failovers_total"); n != 0 {
			t.Fatalf("%v failovers after the first byte", n)
		}
	})
	t.Run("once", func(t *testing.T) {
		t.Parallel()
		d := startDaemon(t, fastLiveness)
		first := mustDialRaw(t, d, "ws", negotiate.ClientConfig{AgentID: "once-first", Models: []string{"gpt-4o"}})
		req := mustDialRaw(t, d, "ws", negotiate.ClientConfig{AgentID: "once-req", Features: []negotiate.Feature{negotiate.FeatureOnce}})
		if !req.sess.Params.Has(negotiate.FeatureOnce) {
			t.Fatal("the daemon did not grant feature once")
		}
		fr, err := frame.AppendEncode(nil, corpus(t, "req-chat-tiny-07.json"), frame.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		req.mustSend(0, negotiate.FlagOnce, 1, "", req.protect(0, fr))
		first.recvDataAnswering(10 * time.Second)
		second := mustDialRaw(t, d, "ws", negotiate.ClientConfig{AgentID: "once-second", Models: []string{"gpt-4o"}})
		first.conn.Close()
		req.expectError(10*time.Second, 1, "agent_gone", false)
		second.expectSilence(200 * time.Millisecond)
		if n := metric(t, d, "m2md_failovers_total"); n != 0 {
			t.Fatalf("%v failovers of a request marked ONCE", n)
		}
	})
	t.Run("once without the feature", func(t *testing.T) {
		t.Parallel()
		d := startDaemon(t, nil)
		req := mustDialRaw(t, d, "ws", negotiate.ClientConfig{AgentID: "once-nofeat"})
		fr, err := frame.AppendEncode(nil, corpus(t, "req-chat-tiny-07.json"), frame.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		req.mustSend(0, negotiate.FlagOnce, 1, "", req.protect(0, fr))
		req.expectClose(5*time.Second, negotiate.ReasonError)
	})
}

// The liveness check's settings in the tests that do not measure the
// defaults: short, so the suite stays fast.
const (
	busyPingAfter   = 200 * time.Millisecond
	busyPongTimeout = 800 * time.Millisecond
)

func fastLiveness(c *daemon.Config) {
	c.BusyPingAfter, c.BusyPongTimeout = busyPingAfter, busyPongTimeout
}

// recvOrPong receives one message within timeout, answering a PING with
// PONG as an agent's reader does; it returns what recv returns, with a
// control message's error cleared.
func (a *rawAgent) recvOrPong(timeout time.Duration) (*received, *negotiate.ControlMessage, error) {
	r, cm, err := a.recv(timeout)
	if errors.Is(err, errControl) {
		if cm.Type == negotiate.TypePing {
			a.sendControl(negotiate.AppendPong(nil, a.sess.ID, time.Now()))
		}
		return nil, cm, nil
	}
	return r, cm, err
}

// TestClusterNodeStallAndLoss: with the cluster's default failure detector
// (heartbeats every 250 ms, dead after 4 s), a node whose link to its peer
// stalls for 3 s (its route held, as a process stopped with SIGSTOP and
// continued holds it) is not declared dead; once its link is black-holed
// for good, the peer declares it dead within 5 s and the request its
// provider held fails over to a provider of the model on the peer.
func TestClusterNodeStallAndLoss(t *testing.T) {
	t.Parallel()
	a := startDaemon(t, clusterConfig(nil, nil))
	relay := newTCPRelay(t, a.Cluster().RouteAddr)
	b := startDaemon(t, clusterConfig([]string{"nats://" + relay.ln.Addr().String()}, nil))
	nodes := []*testDaemon{a, b}
	waitMesh(t, nodes)

	relay.hold.Store(true)
	time.Sleep(3 * time.Second)
	relay.hold.Store(false)
	time.Sleep(time.Second) // the heartbeats held back arrive
	for _, d := range nodes {
		if n := metric(t, d, "m2md_cluster_nodes_down_total"); n != 0 || d.Cluster().Nodes != 1 {
			t.Fatalf("node %s declared %v nodes dead over a 3 s stall (hears %d)", d.Cluster().Node, n, d.Cluster().Nodes)
		}
	}

	bprov := mustDialRaw(t, b, "ws", negotiate.ClientConfig{AgentID: "stall-bprov", Models: []string{"gpt-4o"}})
	waitAgentAt(t, a, "", "stall-bprov", b)
	req := mustDialRaw(t, a, "ws", negotiate.ClientConfig{AgentID: "stall-req"})
	_, id := req.request("", corpus(t, "req-chat-tiny-07.json"))
	bprov.recvDataAnswering(10 * time.Second)
	aprov := mustDialRaw(t, a, "ws", negotiate.ClientConfig{AgentID: "stall-aprov", Models: []string{"gpt-4o"}})
	start := time.Now()
	relay.dark(true)
	dl := aprov.recvDataAnswering(15 * time.Second)
	el := time.Since(start)
	t.Logf("request failed over %v after node %s was cut off", el, b.Cluster().Node)
	if el > 5*time.Second {
		t.Fatalf("failed over after %v, want within 5 s", el)
	}
	aprov.reply(dl.ch, dl.hdr.RequestID, true, corpus(t, "resp-chat-01.json"))
	if r := req.recvDataAnswering(10 * time.Second); r.code != "" || r.hdr.RequestID != id || r.peer != "stall-aprov" {
		t.Fatalf("requester got code %q for %d from %q", r.code, r.hdr.RequestID, r.peer)
	}
	waitMetric(t, a, 1, "m2md_failovers_total", "reason=node_gone")
	relay.dark(false)
}

// TestIdleSessionSurvivesOutage: an idle provider's session outlives 20 s
// in which nothing passes either way (a relay black-holes its traffic: a
// Wi-Fi roam, a partition, a NAT rebinding), on both transports with the
// default settings, and carries a request afterwards without
// reconnecting: the busy check that gives up on a silent provider holding
// requests within seconds leaves idle sessions alone. With the former 5 s
// --quic-idle-timeout the QUIC connection died in it.
func TestIdleSessionSurvivesOutage(t *testing.T) {
	const outage = 20 * time.Second
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			d := startDaemon(t, nil)
			path := newFaultPath(t, d, tr)
			prov := path.dialRaw(t, d, negotiate.ClientConfig{AgentID: "outage-prov", Models: []string{"gpt-4o"}})
			req := mustDialRaw(t, d, "ws", negotiate.ClientConfig{AgentID: "outage-req"})
			path.dark(true)
			time.Sleep(outage)
			path.dark(false)
			ch, id := req.request("", corpus(t, "req-chat-tiny-07.json"))
			dl := prov.recvDataAnswering(10 * time.Second)
			if dl.hdr.RequestID == 0 || dl.hdr.IsReply() {
				t.Fatalf("delivery after the outage: %+v", dl.hdr)
			}
			prov.reply(dl.ch, dl.hdr.RequestID, true, corpus(t, "resp-chat-01.json"))
			r := req.recvDataAnswering(10 * time.Second)
			if r.code != "" || !r.hdr.IsEnd() || r.hdr.RequestID != id || r.ch != ch {
				t.Fatalf("reply after the outage: code %q flags %v id %d", r.code, r.hdr.Flags, r.hdr.RequestID)
			}
			for _, reason := range []string{"disconnected", "timeout"} {
				if n := metric(t, d, "m2md_sessions_closed_total", "reason="+reason); n != 0 {
					t.Fatalf("%v sessions ended (%s) during the outage", n, reason)
				}
			}
		})
	}
}

// TestClientOnce: a Go client's request sent with client.Once is never
// delivered to a second provider: its provider lost, it fails with
// agent_gone while another provider of the model sits idle. Sent
// without, the same loss is invisible to the caller.
func TestClientOnce(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, nil)
	c := dialClient(t, d.url("ws"), client.Options{AgentID: "co-req"})
	for _, once := range []bool{true, false} {
		first := mustDialRaw(t, d, "ws", negotiate.ClientConfig{AgentID: "co-first", Models: []string{"gpt-4o"}})
		var opts []client.CallOption
		if once {
			opts = append(opts, client.Once())
		}
		errc := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := c.Do(ctx, corpus(t, "req-chat-tiny-07.json"), opts...)
			errc <- err
		}()
		first.recvDataAnswering(10 * time.Second)
		second := mustDialRaw(t, d, "ws", negotiate.ClientConfig{AgentID: "co-second", Models: []string{"gpt-4o"}})
		first.conn.Close()
		if once {
			second.expectSilence(200 * time.Millisecond)
		} else {
			dl := second.recvDataAnswering(10 * time.Second)
			second.reply(dl.ch, dl.hdr.RequestID, true, corpus(t, "resp-chat-01.json"))
		}
		err := <-errc
		if once && remoteCode(err) != negotiate.CodeAgentGone {
			t.Fatalf("Once: %v, want agent_gone", err)
		}
		if !once && err != nil {
			t.Fatalf("without Once: %v, want the second provider's answer", err)
		}
		second.conn.Close()
		waitSessions(t, d, 1)
	}
}

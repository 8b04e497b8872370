package integration

import (
	"testing"
	"time"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
)

// TestManyChannelsPerSession: a QUIC agent that has used 999 streams of its
// own (besides the control stream) and then serves requests on streams the
// daemon opens to it still gets every delivery. The daemon's
// channel table of one direction is sized from the stream limit and the
// outstanding-delivery limit, so it cannot fill: a fixed cap (1,024) would
// drop frames past it with only a metric.
func TestManyChannelsPerSession(t *testing.T) {
	d := startDaemon(t, nil)
	const own, served = 999, 40
	agent := mustDialRaw(t, d, "quic", negotiate.ClientConfig{AgentID: "busy", Security: frame.SecurityHMAC, Models: []string{"m-busy"}})
	prov := mustDialRaw(t, d, "quic", negotiate.ClientConfig{AgentID: "prov", Security: frame.SecurityHMAC})
	body := corpus(t, "req-chat-tiny-07.json")
	resp := corpus(t, "resp-chat-01.json")

	// The agent's own streams: one request each, answered by the daemon
	// (unknown_agent) on that stream.
	for range own {
		agent.request("nobody", body)
	}
	for i := range own {
		if r := agent.recvData(10 * time.Second); r.code != "unknown_agent" {
			t.Fatalf("answer %d: flags %v code %q", i, r.hdr.Flags, r.code)
		}
	}
	// Now the agent serves: each delivery arrives on a stream the daemon
	// opens, beyond the agent's 1,000 channels.
	for range served {
		prov.request("busy", body)
	}
	for i := range served {
		dl := agent.recvData(10 * time.Second)
		if dl.hdr.IsReply() || dl.err != nil {
			t.Fatalf("delivery %d: flags %v err %v", i, dl.hdr.Flags, dl.err)
		}
		agent.reply(dl.ch, dl.hdr.RequestID, true, resp)
	}
	for i := range served {
		if r := prov.recvData(10 * time.Second); !r.hdr.IsEnd() || r.code != "" {
			t.Fatalf("reply %d to the provider's request: code %q", i, r.code)
		}
	}
	if n := metric(t, d, "m2md_queue_drops_total", "reason=too_many_channels"); n != 0 {
		t.Fatalf("%v frames dropped for a full channel table", n)
	}
}

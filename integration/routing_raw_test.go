package integration

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
)

var modes = []frame.Security{frame.SecurityNone, frame.SecurityHMAC, frame.SecurityAEAD}

// TestRouteByModelAllModes sends a real corpus request through the daemon to
// a provider serving its model and a response back, on both transports and
// in every security mode, with requester and provider on different
// transports, and checks the bytes end to end.
func TestRouteByModelAllModes(t *testing.T) {
	d := startDaemon(t, nil)
	reqBody := corpus(t, "req-chat-1k-01.json") // model gpt-4o
	respBody := corpus(t, "resp-chat-06.json")  // a gpt-4o response
	for _, mode := range modes {
		for _, provTr := range transports {
			for _, reqTr := range transports {
				name := fmt.Sprintf("%s/provider-%s/requester-%s", mode, provTr, reqTr)
				t.Run(name, func(t *testing.T) {
					prov := mustDialRaw(t, d, provTr, negotiate.ClientConfig{
						AgentID: "prov-" + mode.String() + provTr + reqTr, Security: mode, Models: []string{"gpt-4o"},
					})
					req := mustDialRaw(t, d, reqTr, negotiate.ClientConfig{
						AgentID: "req-" + mode.String() + provTr + reqTr, Security: mode,
					})
					_, id := req.request("", reqBody)
					got := prov.recvData(5 * time.Second)
					if got.hdr.IsReply() || !bytes.Equal(got.body, reqBody) || got.peer != req.sess.AgentID {
						t.Fatalf("provider got reply=%v peer=%q err=%v", got.hdr.IsReply(), got.peer, got.err)
					}
					prov.reply(got.ch, got.hdr.RequestID, true, respBody)
					back := req.recvData(5 * time.Second)
					if !back.hdr.IsReply() || !back.hdr.IsEnd() || back.hdr.RequestID != id {
						t.Fatalf("requester got flags %v id %d, want REPLY|END id %d", back.hdr.Flags, back.hdr.RequestID, id)
					}
					if !bytes.Equal(back.body, respBody) || back.peer != prov.sess.AgentID {
						t.Fatalf("response differs (err %v, peer %q)", back.err, back.peer)
					}
				})
			}
		}
	}
}

func TestNoRouteIsAnsweredPromptly(t *testing.T) {
	d := startDaemon(t, nil)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "lonely-" + tr})
			start := time.Now()
			_, id := req.request("", corpus(t, "req-chat-1k-01.json"))
			back := req.recvData(2 * time.Second)
			if back.code != "no_route" || back.hdr.RequestID != id || !back.hdr.IsEnd() {
				t.Fatalf("got code %q id %d flags %v, want no_route for %d", back.code, back.hdr.RequestID, back.hdr.Flags, id)
			}
			if el := time.Since(start); el > time.Second {
				t.Fatalf("error took %v", el)
			}
			_, id = req.request("nobody", corpus(t, "req-chat-1k-01.json"))
			if back := req.recvData(2 * time.Second); back.code != "unknown_agent" || back.hdr.RequestID != id {
				t.Fatalf("got %q, want unknown_agent", back.code)
			}
		})
	}
}

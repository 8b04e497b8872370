package integration

import (
	"context"
	"testing"
	"time"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/negotiate"
)

// TestReplyAfterProvidersClose: over QUIC an agent's CLOSE travels on the
// control stream and can overtake the reply it wrote just before on a data
// stream (docs/protocol.md §3.5). The daemon acknowledges the CLOSE and
// still takes the replies that arrive until the agent has closed the
// connection: the requester gets its answer, not agent_gone. Here the
// provider sends its CLOSE first and its reply after it, the order the
// overtaking produces. (Over WebSocket nothing can overtake: the daemon
// closes the connection once its acknowledgement is written.)
func TestReplyAfterProvidersClose(t *testing.T) {
	d := startDaemon(t, nil)
	resp := corpus(t, "resp-chat-01.json")
	body := []byte(`{"model":"late-model","messages":[{"role":"user","content":"answer, then leave"}]}`)
	for _, tr := range []string{"quic"} {
		t.Run(tr, func(t *testing.T) {
			prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "late-p-" + tr, Models: []string{"late-model"}})
			req := dialClient(t, d.url(tr), client.Options{AgentID: "late-r-" + tr, TLSConfig: d.clientTLS(t)})
			type result struct {
				body []byte
				err  error
			}
			got := make(chan result, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				r, err := req.Do(ctx, body)
				if err != nil {
					got <- result{err: err}
					return
				}
				got <- result{body: r.Body}
			}()
			r := prov.recvData(5 * time.Second)
			prov.sendControl(negotiate.AppendClose(nil, prov.sess.ID, time.Now(), negotiate.ReasonNormal, "leaving"))
			prov.expectControl(5*time.Second, negotiate.TypeClose) // the acknowledgement
			prov.reply(r.ch, r.hdr.RequestID, true, resp)
			res := <-got
			prov.conn.Close() // the agent closes once its replies are answered for
			if res.err != nil || string(res.body) != string(resp) {
				t.Fatalf("the reply that followed the provider's CLOSE: %v", res.err)
			}
		})
	}
}

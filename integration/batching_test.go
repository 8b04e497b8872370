package integration

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// metricSum adds up every series of the named counter whose labels contain
// match (e.g. `transport="ws"`).
func metricSum(t testing.TB, d *testDaemon, name, match string) float64 {
	t.Helper()
	_, body := adminGet(t, d, "/metrics")
	sum := 0.0
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") || !strings.Contains(line, match) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// chatFrame is a gpt-4o request (or reply) frame whose content names i.
func chatFrame(t testing.TB, i int) []byte {
	t.Helper()
	fr, err := frame.AppendEncode(nil, fmt.Appendf(nil, `{"model":"gpt-4o","messages":[{"role":"user","content":"message %d"}]}`, i), frame.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return fr
}

func contentIndex(t testing.TB, body []byte) int {
	t.Helper()
	var i int
	at := strings.Index(string(body), "message ")
	if at < 0 {
		t.Fatalf("body %s names no message", body)
	}
	if _, err := fmt.Sscanf(string(body[at:]), "message %d", &i); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	return i
}

// TestWriterBatchesKeepOrder: a burst of requests arrives at the daemon at
// once, so its writer towards the provider takes them in batches (one
// write system call each on WebSocket); the provider answers with a burst
// of its own. Every delivery and every reply arrives in the order it was
// sent, with the daemon's sequence numbers in order (checked on receipt in
// aead mode), and the batches are fewer than the frames: the writer did
// coalesce.
func TestWriterBatchesKeepOrder(t *testing.T) {
	for _, mode := range []frame.Security{frame.SecurityNone, frame.SecurityAEAD} {
		t.Run(mode.String(), func(t *testing.T) {
			d := startDaemon(t, func(c *daemon.Config) {
				c.MessagesPerMinute, c.BytesPerSecond = -1, -1
			})
			prov := mustDialRaw(t, d, "ws", negotiate.ClientConfig{AgentID: "bprov", Security: mode, Models: []string{"gpt-4o"}})
			req := mustDialRaw(t, d, "ws", negotiate.ClientConfig{AgentID: "breq", Security: mode})
			const n = 400
			frames := make([][]byte, n)
			for i := range frames {
				frames[i] = chatFrame(t, i)
			}
			batches0 := metricSum(t, d, "m2md_write_batches_total", `transport="ws"`)
			out0 := metricSum(t, d, "m2md_frames_out_total", `transport="ws"`)

			// One burst, one write: the daemon reads n requests back to back.
			ch := req.channel()
			req.conn.Cork()
			for i, fr := range frames {
				req.mustSend(ch, 0, uint64(i+1), "", req.protect(ch, fr))
			}
			if err := req.conn.Uncork(); err != nil {
				t.Fatal(err)
			}
			ids := make([]uint64, n)
			for i := range n {
				r := prov.recvData(20 * time.Second)
				if r.err != nil {
					t.Fatalf("delivery %d: %v", i, r.err)
				}
				if got := contentIndex(t, r.body); got != i {
					t.Fatalf("delivery %d carries request %d", i, got)
				}
				ids[i] = r.hdr.RequestID
			}
			prov.conn.Cork()
			for i, id := range ids {
				prov.mustSend(ch, negotiate.FlagReply|negotiate.FlagEnd, id, "", prov.protect(ch, frames[i]))
			}
			if err := prov.conn.Uncork(); err != nil {
				t.Fatal(err)
			}
			for i := range n {
				r := req.recvData(20 * time.Second)
				if r.err != nil {
					t.Fatalf("reply %d: %v", i, r.err)
				}
				if r.hdr.RequestID != uint64(i+1) || contentIndex(t, r.body) != i {
					t.Fatalf("reply %d answers request %d with message %d", i, r.hdr.RequestID, contentIndex(t, r.body))
				}
			}
			batches := metricSum(t, d, "m2md_write_batches_total", `transport="ws"`) - batches0
			out := metricSum(t, d, "m2md_frames_out_total", `transport="ws"`) - out0
			t.Logf("%v frames out in %v batches", out, batches)
			if out != 2*n {
				t.Fatalf("%v frames out, want %d", out, 2*n)
			}
			if batches >= out {
				t.Fatalf("%v batches for %v frames: the writer wrote one frame at a time", batches, out)
			}
		})
	}
}

// TestWriterLoneMessageAtOnce: at low load each message is its own batch,
// written as soon as it is queued; nothing waits for a batch to fill (a
// writer that did would leave these round trips hanging).
func TestWriterLoneMessageAtOnce(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			d := startDaemon(t, nil)
			prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "lprov", Models: []string{"gpt-4o"}})
			req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "lreq"})
			match := fmt.Sprintf("transport=%q", tr)
			for i := range 5 {
				batches0 := metricSum(t, d, "m2md_write_batches_total", match)
				ch, id := req.request("", fmt.Appendf(nil, `{"model":"gpt-4o","messages":[{"role":"user","content":"message %d"}]}`, i))
				r := prov.recvData(10 * time.Second)
				if contentIndex(t, r.body) != i {
					t.Fatalf("delivery %d: %s", i, r.body)
				}
				prov.reply(r.ch, r.hdr.RequestID, true, []byte(`{"id":"x","object":"chat.completion","choices":[]}`))
				back := req.recvData(10 * time.Second)
				if back.hdr.RequestID != id || back.ch != ch {
					t.Fatalf("reply to %d on %d, want %d on %d", back.hdr.RequestID, back.ch, id, ch)
				}
				req.conn.ReleaseChannel(ch)
				// The count goes up as the batch is handed over, which on
				// QUIC is after the message left: give it a moment.
				got := 0.0
				for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
					if got = metricSum(t, d, "m2md_write_batches_total", match) - batches0; got >= 2 {
						break
					}
				}
				if got != 2 {
					t.Fatalf("round trip %d took %v batches, want 2 (the delivery, the reply)", i, got)
				}
			}
		})
	}
}

// TestStalledBatchClosed: like TestStalledWriterClosed, with deliveries
// small enough to be held in the writer's batches, so that what blocks is
// the batch's write. The stall timer must still close the provider.
func TestStalledBatchClosed(t *testing.T) {
	d := startDaemon(t, func(c *daemon.Config) {
		fastKeepalive(c)
		c.SlowConsumerGrace = 500 * time.Millisecond
		c.CloseTimeout = time.Second
		c.MessagesPerMinute, c.BytesPerSecond = -1, -1
	})
	fr := paddedFrame(t, 16<<10)
	prov := mustDialRaw(t, d, "ws", negotiate.ClientConfig{AgentID: "stalled", Models: []string{"gpt-4o"}},
		transport.Config{ReceiveQueue: 2, ReceiveBudget: 64 << 10})
	defer prov.conn.Close() // never reads
	req := mustDialRaw(t, d, "ws", negotiate.ClientConfig{AgentID: "stall-req"})
	const n = 800 // 12.5 MiB: more than the stalled side's socket buffers absorb
	ch := req.channel()
	req.conn.Cork()
	for id := uint64(1); id <= n; id++ {
		req.mustSend(ch, 0, id, "", fr)
	}
	if err := req.conn.Uncork(); err != nil {
		t.Fatal(err)
	}
	codes := map[string]int{}
	for range n {
		r := req.recvDataAnswering(30 * time.Second)
		codes[r.code]++
	}
	t.Logf("all %d requests ended: %v", n, codes)
	checkStalledCodes(t, codes)
	prov.conn.Close()
	waitSessions(t, d, 1)
}

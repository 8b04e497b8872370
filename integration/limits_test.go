package integration

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/negotiate"
)

// TestPerIPSessionLimit: the connection over the per-address limit gets
// REJECT RATE_LIMITED; the others keep working.
func TestPerIPSessionLimit(t *testing.T) {
	d := startDaemon(t, func(c *daemon.Config) { c.MaxSessionsPerIP = 2 })
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			a := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "ip-a-" + tr, Models: []string{"gpt-4o"}})
			b := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "ip-b-" + tr})
			_, err := dialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "ip-c-" + tr})
			if !errors.Is(err, negotiate.ErrRateLimited) {
				t.Fatalf("third session: %v, want REJECT RATE_LIMITED", err)
			}
			_, id := b.request("", corpus(t, "req-chat-tiny-07.json"))
			got := a.recvData(5 * time.Second)
			a.reply(got.ch, got.hdr.RequestID, true, corpus(t, "resp-chat-01.json"))
			if back := b.recvData(5 * time.Second); back.hdr.RequestID != id || back.code != "" {
				t.Fatalf("existing sessions disturbed: %+v", back)
			}
			a.conn.Close()
			b.conn.Close()
			waitSessions(t, d, 0)
		})
	}
	if n := metric(t, d, "m2md_limited_total", "limit=sessions_per_ip"); n < 2 {
		t.Fatalf("m2md_limited_total sessions_per_ip = %v", n)
	}
}

// TestSessionRateLimits: each per-session limit, off by default, still
// works when set: requests beyond the allowance are refused with
// rate_limited, promptly, and counted under that limit alone.
func TestSessionRateLimits(t *testing.T) {
	for _, tc := range []struct {
		limit    string // m2md_limited_total's label
		set      func(*daemon.Config)
		body     string
		n, least int // requests sent, of which at least least refused
	}{
		{"message_rate", func(c *daemon.Config) { c.MessagesPerMinute = 5 }, "req-chat-tiny-07.json", 8, 3},
		// The byte bucket's burst is max(rate, max payload): ~7 KiB in 10
		// requests against 4 KiB. (Fewer than the 10 rate_limited
		// answers a session gets per second: beyond, refusals are silent.)
		{"byte_rate", func(c *daemon.Config) { c.MaxPayload, c.BytesPerSecond = 4096, 4096 }, "req-chat-1k-01.json", 10, 3},
	} {
		t.Run(tc.limit, func(t *testing.T) {
			d := startDaemon(t, tc.set)
			for _, tr := range transports {
				t.Run(tr, func(t *testing.T) {
					req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "rate-" + tr})
					limited := 0
					for i := 0; i < tc.n; i++ {
						req.request("nobody", corpus(t, tc.body))
						back := req.recvData(2 * time.Second)
						req.conn.ReleaseChannel(back.ch)
						switch back.code {
						case "unknown_agent":
						case "rate_limited":
							limited++
						default:
							t.Fatalf("request %d: code %q", i, back.code)
						}
					}
					if limited < tc.least {
						t.Fatalf("%d of %d requests rate limited, want ≥ %d", limited, tc.n, tc.least)
					}
				})
			}
			if all, this := metric(t, d, "m2md_limited_total"), metric(t, d, "m2md_limited_total", "limit="+tc.limit); this < float64(2*tc.least) || all != this {
				t.Fatalf("m2md_limited_total: %v under %s, %v in all", this, tc.limit, all)
			}
		})
	}
}

// TestDefaultsDoNotRateLimit: a zero-config daemon lets one session send
// more messages and bytes at once than any per-session default it ever had
// (1,000 messages a minute, 10 MB/s with a 16 MiB burst): per-session rate
// limits are off unless set.
func TestDefaultsDoNotRateLimit(t *testing.T) {
	d := startDaemon(t, nil)
	// An incompressible 16 KB request, so that the bytes sent are real.
	noise := make([]byte, 12<<10)
	rand.Read(noise)
	big := []byte(fmt.Sprintf(`{"model":"gpt-4o","messages":[{"role":"user","content":%q}]}`,
		base64.StdEncoding.EncodeToString(noise)))
	const batch, batches = 50, 22
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "norate-" + tr})
			for b := 0; b < batches; b++ {
				for i := 0; i < batch; i++ {
					req.request("nobody", big)
				}
				for i := 0; i < batch; i++ {
					back := req.recvData(10 * time.Second)
					if back.code != "unknown_agent" {
						t.Fatalf("request %d: code %q, want unknown_agent", b*batch+i, back.code)
					}
					req.conn.ReleaseChannel(back.ch)
				}
			}
		})
	}
	if n := metric(t, d, "m2md_limited_total"); n != 0 {
		t.Fatalf("m2md_limited_total = %v, want 0", n)
	}
}

// TestZeroConfigStreamingLoad: what a per-session limit of 1,000 messages
// a minute would refuse in the first second (a streaming provider sends
// hundreds of messages a second): one provider streams 40-chunk replies to
// 32 concurrent requesters (1,280 messages from one session at once)
// through a zero-config daemon, with no error.
func TestZeroConfigStreamingLoad(t *testing.T) {
	const requesters, chunks = 32, 40
	d := startDaemon(t, nil)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "sprov-" + tr, Models: []string{"gpt-4o"}})
			reqs := make([]*rawAgent, requesters)
			ids := make([]uint64, requesters)
			for i := range reqs {
				reqs[i] = mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: fmt.Sprintf("sreq-%s-%d", tr, i)})
				_, ids[i] = reqs[i].request("", corpus(t, "req-stream-01.json"))
			}
			var dls []*received
			for range requesters {
				dls = append(dls, prov.recvData(10*time.Second))
			}
			// The requesters read while the provider streams.
			errs := make(chan error, requesters)
			for i, r := range reqs {
				go func() {
					for k := range chunks {
						got, _, err := r.recv(20 * time.Second)
						if err == nil && (got.code != "" || got.hdr.RequestID != ids[i] || got.hdr.IsEnd() != (k == chunks-1)) {
							err = fmt.Errorf("requester %d, reply %d: code %q id %d flags %v", i, k, got.code, got.hdr.RequestID, got.hdr.Flags)
						}
						if err != nil {
							errs <- err
							return
						}
					}
					errs <- nil
				}()
			}
			fr := encode(t, chunk("load", 0))
			for k := range chunks {
				flags := negotiate.FlagReply
				if k == chunks-1 {
					flags |= negotiate.FlagEnd
				}
				for _, dl := range dls {
					prov.mustSend(dl.ch, flags, dl.hdr.RequestID, "", prov.protect(dl.ch, fr))
				}
			}
			for range requesters {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	if n := metric(t, d, "m2md_limited_total"); n != 0 {
		t.Fatalf("m2md_limited_total = %v, want 0", n)
	}
}

// TestRateLimitKeepsLiveness: a session over its --messages-per-minute
// still gets its PING answered and its PONGs heard: a requester that has
// spent its one message a minute on a request that takes 2 s, and whose
// Go client PINGs the silent daemon meanwhile, keeps its session and
// gets the answer; the provider, whose one message is its reply, answers
// the daemon's PINGs without spending it. Control messages have their
// own bound; before, they were dropped with the DATA over the rate and
// the client took the daemon for dead.
func TestRateLimitKeepsLiveness(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			d := startDaemon(t, func(c *daemon.Config) {
				fastLiveness(c)
				c.MessagesPerMinute = 1
			})
			prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "rl-prov", Models: []string{"gpt-4o"}})
			c := dialClient(t, d.url(tr), client.Options{
				AgentID: "rl-req", InsecureSkipVerifyDevOnly: true,
				BusyPingAfter: busyPingAfter, BusyPongTimeout: busyPongTimeout,
			})
			errc := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				_, err := c.Do(ctx, corpus(t, "req-chat-tiny-07.json"))
				errc <- err
			}()
			dl := prov.recvDataAnswering(10 * time.Second)
			pings := 0
			for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
				if _, cm, err := prov.recvOrPong(time.Until(end)); err == nil && cm != nil && cm.Type == negotiate.TypePing {
					pings++
				}
			}
			if pings == 0 {
				t.Fatal("the daemon never PINGed the silent provider")
			}
			prov.reply(dl.ch, dl.hdr.RequestID, true, corpus(t, "resp-chat-01.json"))
			if err := <-errc; err != nil {
				t.Fatalf("request of a session over its message rate: %v", err)
			}
			for _, m := range []string{"m2md_sessions_closed_total", "m2md_failovers_total"} {
				if n := metric(t, d, m); n != 0 {
					t.Fatalf("%s = %v", m, n)
				}
			}
		})
	}
}

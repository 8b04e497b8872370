package integration

import (
	"errors"
	"testing"
	"time"

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

// TestMessageRateLimit: requests beyond the session's message allowance are
// refused with rate_limited, promptly.
func TestMessageRateLimit(t *testing.T) {
	d := startDaemon(t, func(c *daemon.Config) { c.MessagesPerMinute = 5 })
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "rate-" + tr})
			limited := 0
			for i := 0; i < 8; i++ {
				req.request("nobody", corpus(t, "req-chat-tiny-07.json"))
				switch back := req.recvData(2 * time.Second); back.code {
				case "unknown_agent":
				case "rate_limited":
					limited++
				default:
					t.Fatalf("request %d: code %q", i, back.code)
				}
			}
			if limited < 3 {
				t.Fatalf("%d of 8 requests rate limited, want ≥ 3 (allowance 5)", limited)
			}
		})
	}
}

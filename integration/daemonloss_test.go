package integration

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/negotiate"
)

// TestClientNoticesVanishedDaemon: a Go client with a request waiting on a
// daemon whose machine vanishes (a relay black-holes both ways) fails the
// request with ErrConnectionLost within 5 s with default options, and its
// next session is on its second daemon URL at once. Before, it waited for
// the protocol keepalive (90 s) or QUIC's idle timeout (30 s).
func TestClientNoticesVanishedDaemon(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			// Short closing timers: the first daemon's session with the client
			// lost its peer, which its shutdown would wait for.
			d1 := startDaemon(t, func(c *daemon.Config) { c.CloseTimeout, c.ShutdownGrace = 500*time.Millisecond, 500*time.Millisecond })
			d2 := startDaemon(t, nil)
			path := newFaultPath(t, d1, tr)
			prov := mustDialRaw(t, d1, "ws", negotiate.ClientConfig{AgentID: "dl-prov", Models: []string{"gpt-4o"}})
			c := dialClient(t, path.url()+","+d2.url(tr), client.Options{
				AgentID: "dl-req", InsecureSkipVerifyDevOnly: true, Reconnect: true,
			})
			first := c.Session().ID
			errc := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_, err := c.Do(ctx, corpus(t, "req-chat-tiny-07.json"))
				errc <- err
			}()
			prov.recvDataAnswering(10 * time.Second)
			start := time.Now()
			path.dark(true)
			var err error
			select {
			case err = <-errc:
			case <-time.After(20 * time.Second):
				t.Fatal("the request still waits 20 s after its daemon vanished")
			}
			el := time.Since(start)
			t.Logf("%s: request failed %v after the daemon vanished: %v", tr, el, err)
			if !errors.Is(err, client.ErrConnectionLost) {
				t.Fatalf("request error %v, want ErrConnectionLost", err)
			}
			if el > 5*time.Second {
				t.Fatalf("the client noticed after %v, want within 5 s", el)
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				s := c.Session()
				if s.ID != "" && s.ID != first {
					moved := time.Since(start) - el
					t.Logf("%s: next session, on the second daemon, %v after the failure", tr, moved)
					if moved > 2*time.Second {
						t.Fatalf("next session after %v, want at once", moved)
					}
					if !d2.SessionOpen(s.ID) {
						t.Fatalf("next session %s is not on the second daemon", s.ID)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("no new session within 5 s")
				}
				time.Sleep(5 * time.Millisecond)
			}
			path.dark(false)
		})
	}
}

// TestProviderWaitsForDaemon: a provider started before its daemon
// (WaitForDaemon, what `m2md demo provider` and `m2md upstream` set) keeps
// trying and is registered within 2 s of the daemon accepting; killed
// (Crash, no CLOSE) and started again, the daemon has it back within 2 s
// too, with the client's default backoff.
func TestProviderWaitsForDaemon(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := func(c *daemon.Config) { c.WSAddr, c.QUICAddr = addr, "-" }
	url := "ws://" + addr + daemon.DefaultWSPath

	dialed := make(chan *client.Client, 1)
	dialErr := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := client.Dial(ctx, url, client.Options{
			AgentID: "early-prov", Models: []string{"gpt-4o"}, Reconnect: true, WaitForDaemon: true,
			Handler: client.HandlerFunc(func(_ context.Context, _ *client.Request, w client.ResponseWriter) {
				_ = w.Respond(corpus(t, "resp-chat-01.json"))
			}),
		})
		if err != nil {
			dialErr <- err
			return
		}
		dialed <- c
	}()
	// Long enough for the backoff to reach its maximum (the former 30 s
	// maximum had it wait 3.2-6.4 s by then).
	time.Sleep(6 * time.Second)
	for round := range 2 {
		d := startDaemon(t, cfg)
		accepting := time.Now()
		registeredWithin(t, d, "early-prov", 2*time.Second, accepting)
		if round == 0 {
			select {
			case c := <-dialed:
				t.Cleanup(func() { c.Close() })
			case err := <-dialErr:
				t.Fatalf("Dial: %v", err)
			case <-time.After(5 * time.Second):
				t.Fatal("Dial did not return once the daemon accepted")
			}
		}
		d.Crash()
		if ok, err := d.Wait(10 * time.Second); !ok || err != nil {
			t.Fatalf("crashed daemon: returned %v, %v", ok, err)
		}
		time.Sleep(3 * time.Second)
	}
}

// registeredWithin waits until agent serves requests on d, and fails if
// that takes more than limit from since.
func registeredWithin(t *testing.T, d *testDaemon, agent string, limit time.Duration, since time.Time) {
	t.Helper()
	deadline := since.Add(limit + 10*time.Second)
	for !hasAgent(d, agent) {
		if time.Now().After(deadline) {
			t.Fatalf("%s not registered %v after the daemon accepted", agent, time.Since(since))
		}
		time.Sleep(5 * time.Millisecond)
	}
	el := time.Since(since)
	t.Logf("%s registered %v after the daemon accepted", agent, el)
	if el > limit {
		t.Fatalf("%s registered after %v, want within %v", agent, el, limit)
	}
}

// hasAgent reports whether the provider's model is served on d (the test's
// provider is its only one).
func hasAgent(d *testDaemon, _ string) bool {
	return slices.Contains(d.Models(""), "gpt-4o")
}

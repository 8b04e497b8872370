package transport

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestQUICRestartedListenerResets: a listener that dies without a word
// (its socket closed, as when its process is killed) and comes back on
// the same address with the same certificate ends its predecessor's idle
// connections at once: the dialing side's next probe draws a stateless
// reset, so its Receive fails within about KeepAlive instead of after the
// idle timeout (30 s).
func TestQUICRestartedListenerResets(t *testing.T) {
	const keepAlive = 200 * time.Millisecond
	stls, ctls := testTLSConfigs(t)
	ln, err := ListenQUIC("127.0.0.1:0", stls, Config{})
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ctx := testCtx(t)
	accepted := make(chan Conn, 1)
	go func() {
		if c, err := ln.Accept(ctx); err == nil {
			accepted <- c
		}
	}()
	client, err := DialQUIC(ctx, addr, ctls, Config{KeepAlive: keepAlive})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server := <-accepted
	mustSend(t, client, ControlChannel, []byte("hello"))
	mustReceive(t, server)
	mustSend(t, server, ControlChannel, []byte("accept"))
	mustReceive(t, client)
	// Quiet: what is acknowledged is acknowledged, so that the client has
	// nothing more to send than its probes and bare keep-alive PINGs (too
	// small to draw a reset).
	time.Sleep(time.Second)
	ln.udp.Close() // the process dies: no CONNECTION_CLOSE goes out
	server.Abort()
	ln.Unbind()

	again, err := ListenQUIC(addr, stls, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Unbind()
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = client.Receive(rctx)
	el := time.Since(start)
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive after the listener restarted: %v after %v, want the connection reset", err, el)
	}
	t.Logf("connection ended %v after the listener came back: %v", el, err)
	if el > 5*keepAlive {
		t.Fatalf("connection ended after %v, want within a few probes of %v", el, keepAlive)
	}
}

package transport

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/m2md/m2md/certs"
	"github.com/m2md/m2md/internal/testkit"
)

// testTimeout bounds every wait in these tests.
const testTimeout = 20 * time.Second

var (
	tlsOnce     sync.Once
	serverTLS   *tls.Config
	clientTLS   *tls.Config
	tlsSetupErr error
)

// testTLSConfigs returns a server config with a self-signed certificate and
// a client config pinned to it; made once per test binary.
func testTLSConfigs(t testing.TB) (server, client *tls.Config) {
	t.Helper()
	tlsOnce.Do(func() {
		dir, err := mkTemp()
		if err != nil {
			tlsSetupErr = err
			return
		}
		cert, fp, err := certs.EnsureDevCert(dir)
		if err != nil {
			tlsSetupErr = err
			return
		}
		serverTLS = certs.ServerTLSConfig(cert)
		clientTLS, tlsSetupErr = certs.ClientTLSConfig(certs.ClientOptions{PinSHA256: fp})
	})
	if tlsSetupErr != nil {
		t.Fatal(tlsSetupErr)
	}
	return serverTLS, clientTLS
}

func testCtx(t testing.TB) context.Context { return testkit.Context(t, testTimeout) }

// pair is a connected client and server of one transport.
type pair struct {
	client, server Conn
	close          func() // closes both sides and the listener, waits for all
}

type pairMaker func(t testing.TB, clientCfg, serverCfg Config) pair

var transports = []struct {
	name string
	make pairMaker
}{
	{"quic", quicPair},
	{"ws", wsPair},
	{"inproc", pipePair},
}

func pipePair(t testing.TB, clientCfg, serverCfg Config) pair {
	client, server := pipe(clientCfg, serverCfg)
	p := pair{client: client, server: server, close: func() { client.Close(); server.Close() }}
	t.Cleanup(p.close)
	return p
}

func quicPair(t testing.TB, clientCfg, serverCfg Config) pair {
	t.Helper()
	stls, ctls := testTLSConfigs(t)
	ln, err := ListenQUIC("127.0.0.1:0", stls, serverCfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	accepted := make(chan Conn, 1)
	acceptErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept(ctx)
		if err != nil {
			acceptErr <- err
			return
		}
		accepted <- c
	}()
	client, err := DialQUIC(ctx, ln.Addr().String(), ctls, clientCfg)
	if err != nil {
		ln.Unbind()
		t.Fatal(err)
	}
	var server Conn
	select {
	case server = <-accepted:
	case err := <-acceptErr:
		t.Fatal(err)
	}
	p := pair{client: client, server: server}
	var once sync.Once
	p.close = func() {
		once.Do(func() {
			var wg sync.WaitGroup
			wg.Go(func() { client.Close() })
			wg.Go(func() { server.Close() })
			wg.Wait()
			ln.Unbind()
		})
	}
	t.Cleanup(p.close)
	return p
}

func wsPair(t testing.TB, clientCfg, serverCfg Config) pair {
	t.Helper()
	return wsPairOn(t, clientCfg, serverCfg, func(h http.Handler) (string, *tls.Config, func()) {
		srv := httptest.NewServer(h)
		return "ws" + strings.TrimPrefix(srv.URL, "http") + "/m2m", nil, srv.Close
	})
}

// wsPairOn is wsPair on the server start returns: its URL, the client's
// TLS configuration and how to stop it.
func wsPairOn(t testing.TB, clientCfg, serverCfg Config, start func(http.Handler) (url string, tls *tls.Config, stop func())) pair {
	t.Helper()
	accepted := make(chan Conn, 1)
	stop := make(chan struct{})
	var handlers sync.WaitGroup
	h := NewWSHandler(serverCfg, func(c Conn) {
		handlers.Add(1)
		defer handlers.Done()
		accepted <- c
		<-stop
	})
	url, tc, stopServer := start(h)
	ctx := testCtx(t)
	client, err := DialWS(ctx, url, tc, clientCfg)
	if err != nil {
		stopServer()
		t.Fatal(err)
	}
	var server Conn
	select {
	case server = <-accepted:
	case <-ctx.Done():
		t.Fatal("no connection accepted")
	}
	p := pair{client: client, server: server}
	var once sync.Once
	p.close = func() {
		once.Do(func() {
			var wg sync.WaitGroup
			wg.Go(func() { client.Close() })
			wg.Go(func() { server.Close() })
			wg.Wait()
			close(stop)
			handlers.Wait()
			stopServer()
		})
	}
	t.Cleanup(p.close)
	return p
}

// wssServer starts a TLS httptest server with h and returns its wss:// URL.
func wssServer(t testing.TB, h http.Handler) string {
	t.Helper()
	stls, _ := testTLSConfigs(t)
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	srv.TLS = stls.Clone()
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return "wss" + strings.TrimPrefix(srv.URL, "https") + "/m2m"
}

func mustReceive(t testing.TB, c Conn) Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	m, err := c.Receive(ctx)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	return m
}

func mustSend(t testing.TB, c Conn, ch ChannelID, msg []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := c.Send(ctx, ch, msg); err != nil {
		t.Fatalf("Send(%d bytes on %d): %v", len(msg), ch, err)
	}
}

// pattern returns n bytes that differ from any shifted copy of themselves,
// so a dropped, doubled or reordered byte shows.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed) + 1
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
	return b
}

func equalMsg(t testing.TB, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("message differs: got %d bytes, want %d (first diff at %d)", len(got), len(want), firstDiff(got, want))
	}
}

func firstDiff(a, b []byte) int {
	for i := 0; i < min(len(a), len(b)); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// checkNoLeaks fails t if goroutines started after before are still running
// once Close has had time to finish.
func checkNoLeaks(t testing.TB, before int) {
	t.Helper()
	// quic-go keeps a closed connection's ids for a few RTOs to answer late
	// packets, and a loaded machine stretches that: allow for it.
	deadline := time.Now().Add(15 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= before {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines left running (started with %d):\n%s", n-before, before, interesting(buf))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// interesting keeps the stacks that involve this package or its libraries.
func interesting(stacks []byte) string {
	var out strings.Builder
	for g := range strings.SplitSeq(string(stacks), "\n\n") {
		if strings.Contains(g, "m2md/transport") || strings.Contains(g, "quic-go") || strings.Contains(g, "websocket") {
			fmt.Fprintf(&out, "%s\n\n", g)
		}
	}
	return out.String()
}

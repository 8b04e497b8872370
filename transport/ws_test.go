package transport

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// wsServer serves NewWSHandler on a plain httptest server; serve gets each
// connection on a goroutine of its own.
func wsServer(t *testing.T, serve func(Conn)) (url string) {
	t.Helper()
	srv := httptest.NewServer(NewWSHandler(Config{}, serve))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/m2m"
}

func TestWSTextMessageRejected(t *testing.T) {
	got := make(chan error, 1)
	url := wsServer(t, func(c Conn) {
		_, err := c.Receive(testCtx(t))
		got <- err
	})
	ctx := testCtx(t)
	raw, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: []string{Subprotocol}})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.CloseNow()
	if err := raw.Write(ctx, websocket.MessageText, []byte(`{"type":"HELLO"}`)); err != nil {
		t.Fatal(err)
	}
	if err := <-got; !errors.Is(err, ErrTextMessage) {
		t.Fatalf("Receive: %v, want ErrTextMessage", err)
	}
	_, _, err = raw.Read(ctx)
	if status := websocket.CloseStatus(err); status != websocket.StatusPolicyViolation {
		t.Fatalf("peer saw %v (status %d), want close 1008", err, status)
	}
}

func TestWSSubprotocolRequired(t *testing.T) {
	url := wsServer(t, func(c Conn) { t.Error("a connection without m2m.v1 was accepted") })
	ctx := testCtx(t)
	for _, offered := range [][]string{nil, {"chat"}, {"m2m.v2", "m2m"}} {
		_, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: offered})
		if err == nil {
			t.Fatalf("dial offering %v succeeded", offered)
		}
		if resp == nil || resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("offering %v: response %v, want 400", offered, resp)
		}
		body, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(body), Subprotocol) {
			t.Fatalf("offering %v: body %q does not say what is needed", offered, body)
		}
	}
	// Offered among others, in any case-sensitive position, it is accepted.
	accepted := make(chan struct{}, 1)
	url2 := wsServer(t, func(c Conn) { accepted <- struct{}{} })
	raw, _, err := websocket.Dial(ctx, url2, &websocket.DialOptions{Subprotocols: []string{"chat", Subprotocol}})
	if err != nil {
		t.Fatal(err)
	}
	raw.CloseNow()
	<-accepted
	if raw.Subprotocol() != Subprotocol {
		t.Fatalf("selected %q", raw.Subprotocol())
	}
}

func TestDialWSRefusesServerWithoutSubprotocol(t *testing.T) {
	// A WebSocket server that ignores subprotocols entirely.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		c.Read(r.Context())
		c.CloseNow()
	}))
	defer srv.Close()
	_, err := DialWS(testCtx(t), "ws"+strings.TrimPrefix(srv.URL, "http"), nil, Config{})
	if !errors.Is(err, ErrProtocol) {
		t.Fatalf("DialWS: %v, want ErrProtocol", err)
	}
	// And a plain HTTP endpoint gives an error naming the status.
	plain := httptest.NewServer(http.NotFoundHandler())
	defer plain.Close()
	_, err = DialWS(testCtx(t), "ws"+strings.TrimPrefix(plain.URL, "http"), nil, Config{})
	if err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("DialWS to a 404: %v", err)
	}
}

func TestWSOverTLS(t *testing.T) {
	_, ctls := testTLSConfigs(t)
	got := make(chan string, 1)
	url := wssServer(t, NewWSHandler(Config{}, func(c Conn) {
		m, err := c.Receive(testCtx(t))
		if err != nil {
			got <- err.Error()
			return
		}
		got <- string(m.Data)
		m.Release()
	}))
	c, err := DialWS(testCtx(t), url, ctls, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mustSend(t, c, ControlChannel, []byte("over wss"))
	if s := <-got; s != "over wss" {
		t.Fatalf("server got %q", s)
	}
	// A client pinned to nothing in particular (system roots) is refused.
	if c2, err := DialWS(testCtx(t), url, nil, Config{}); err == nil {
		c2.Close()
		t.Fatal("DialWS trusted a self-signed certificate without a pin")
	}
}

func TestWSSingleChannel(t *testing.T) {
	p := wsPair(t, Config{}, Config{})
	ctx := testCtx(t)
	for range 3 {
		ch, err := p.client.AcquireChannel(ctx)
		if err != nil || ch != ControlChannel {
			t.Fatalf("AcquireChannel = %d, %v; want 0", ch, err)
		}
		p.client.ReleaseChannel(ch)
	}
	if err := p.client.Send(ctx, 4, []byte("x")); !errors.Is(err, ErrUnknownChannel) {
		t.Fatalf("Send on channel 4: %v", err)
	}
}

func TestWSSendContextCancelled(t *testing.T) {
	p := wsPair(t, Config{}, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.client.Send(ctx, ControlChannel, []byte("x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Send with a cancelled context: %v", err)
	}
	// Nothing was written, so the connection is intact.
	mustSend(t, p.client, ControlChannel, []byte("y"))
	m := mustReceive(t, p.server)
	equalMsg(t, m.Data, []byte("y"))
	m.Release()
}

func TestWSHandlerReturnsBeforeServe(t *testing.T) {
	// ServeHTTP must not hold the request for the session's lifetime, and
	// the connection must still be closed once serve returns.
	release := make(chan struct{})
	serving := make(chan struct{})
	h := NewWSHandler(Config{}, func(c Conn) {
		close(serving)
		<-release
	})
	returned := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		returned <- struct{}{}
	}))
	defer srv.Close()
	ctx := testCtx(t)
	raw, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/m2m",
		&websocket.DialOptions{Subprotocols: []string{Subprotocol}})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.CloseNow()
	<-serving
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		close(release)
		t.Fatal("ServeHTTP did not return while serve was running")
	}
	close(release)
	// serve has returned: the handler closes the connection, which the
	// peer sees as the end of the stream.
	if _, _, err := raw.Read(ctx); err == nil {
		t.Fatal("connection still open after serve returned")
	} else if ctx.Err() != nil {
		t.Fatalf("connection not closed after serve returned: %v", err)
	}
}

package transport

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestDialQUICNothingListening: a dial to a UDP port where nothing answers
// fails within dialSilence (plus slack), not after HandshakeTimeout, and
// says what to check.
func TestDialQUICNothingListening(t *testing.T) {
	// Hold the port so nothing else can take it, and never answer.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	_, client := testTLSConfigs(t)
	start := time.Now()
	c, err := DialQUIC(testCtx(t), pc.LocalAddr().String(), client, Config{HandshakeTimeout: 10 * time.Second})
	if err == nil {
		c.Close()
		t.Fatal("dial succeeded")
	}
	if took := time.Since(start); took > dialSilence+time.Second {
		t.Errorf("dial failed after %v, want within %v", took, dialSilence)
	}
	if !strings.Contains(err.Error(), "is a daemon listening there") {
		t.Errorf("error does not say what to check: %v", err)
	}
}

// TestDialWSWrongPath: a 404 names the path the daemon serves.
func TestDialWSWrongPath(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	_, err := DialWS(testCtx(t), "ws"+strings.TrimPrefix(srv.URL, "http")+"/", nil, Config{})
	if err == nil || !strings.Contains(err.Error(), "/m2m by default") {
		t.Fatalf("error %v does not hint at /m2m", err)
	}
}

package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/openai/ingress"
)

// rawHTTP opens a TCP connection to the endpoint at base (http://host:port).
func rawHTTP(t *testing.T, base string) net.Conn {
	t.Helper()
	return rawHTTPFrom(t, base, "")
}

// rawHTTPFrom is rawHTTP from the loopback address src (127.0.0.2: another
// client IP on the same host); "" lets the system choose.
func rawHTTPFrom(t *testing.T, base, src string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if src != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	c, err := d.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// getModels sends GET /v1/models on c and reads the answer.
func getModels(t *testing.T, c net.Conn, br *bufio.Reader) *http.Response {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET /v1/models HTTP/1.1\r\nHost: m2md\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	c.SetDeadline(time.Time{})
	return resp
}

// A keep-alive connection that sends no next request is closed by the
// endpoint after Limits.IdleTimeout.
func TestOpenAIIdleConnectionClosed(t *testing.T) {
	e := startEdgesWith(t, "quic", frame.SecurityAEAD, nil, nil, &ingress.Limits{IdleTimeout: 300 * time.Millisecond})
	c := rawHTTP(t, e.base)
	br := bufio.NewReader(c)
	if resp := getModels(t, c, br); resp.StatusCode != 200 {
		t.Fatalf("HTTP %d", resp.StatusCode)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := br.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("an idle keep-alive connection was not closed: read %d bytes, %v", n, err)
	}
}

// Connections over the per-IP cap are answered 429 and those over the
// global cap 503, each with Retry-After; a freed slot admits again.
func TestOpenAIConnectionCaps(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits ingress.Limits
		status int
	}{
		{"per-ip", ingress.Limits{MaxConnsPerIP: 2}, http.StatusTooManyRequests},
		{"global", ingress.Limits{MaxConns: 2, MaxConnsPerIP: -1}, http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startEdgesWith(t, "quic", frame.SecurityAEAD, nil, nil, &tc.limits)
			held := make([]net.Conn, 2)
			for i := range held {
				held[i] = rawHTTP(t, e.base)
				if resp := getModels(t, held[i], bufio.NewReader(held[i])); resp.StatusCode != 200 {
					t.Fatalf("connection %d: HTTP %d", i, resp.StatusCode)
				}
			}
			over := rawHTTP(t, e.base)
			over.SetDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(over), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || resp.Header.Get("Retry-After") == "" || errorCode(body) != "too_many_connections" {
				t.Fatalf("over the cap: HTTP %d, Retry-After %q, %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
			}
			held[0].Close()
			deadline := time.Now().Add(10 * time.Second)
			for {
				c := rawHTTP(t, e.base)
				if resp := getModels(t, c, bufio.NewReader(c)); resp.StatusCode == 200 {
					break
				}
				c.Close()
				if time.Now().After(deadline) {
					t.Fatal("a freed slot does not admit a connection")
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// Eight uploads, two from each of four client IPs, stall one byte short of
// 16 MiB under the default limits:
// each body's buffer doubles as its bytes arrive, taking each growth from
// the body budget (64 MiB) before reading more; the growths that do not
// fit are answered 503 with Retry-After part-way through their bodies, and
// give back what they held as they are refused, so four are read while
// the other four are refused, and the endpoint holds
// at most the budget (plus 8 MiB of slack for the rest of the process)
// while they stall.
func TestOpenAIStalledUploadsBounded(t *testing.T) {
	e := startEdgesWith(t, "quic", frame.SecurityAEAD, nil, nil, &ingress.Limits{})
	const size = 16 << 20
	payload := bytes.Repeat([]byte(" "), size-1)
	base := heapInUse()

	type result struct {
		status     int
		retryAfter string
	}
	results := make(chan result, 8)
	var written sync.WaitGroup
	for i := range 8 {
		// Two uploads from each of four client IPs: each IP's share of
		// the budget is half of it, which two bodies of 16 MiB fit.
		c := rawHTTPFrom(t, e.base, fmt.Sprintf("127.0.0.%d", 1+i/2))
		written.Add(1)
		go func() {
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				results <- result{}
				return
			}
			results <- result{resp.StatusCode, resp.Header.Get("Retry-After")}
		}()
		go func() {
			defer written.Done()
			c.SetWriteDeadline(time.Now().Add(20 * time.Second))
			fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: m2md\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", size)
			c.Write(payload)
		}()
	}
	// The four refused are answered while the four admitted stall.
	refused := 0
	for range 4 {
		select {
		case r := <-results:
			if r.status != http.StatusServiceUnavailable || r.retryAfter == "" {
				t.Fatalf("an upload beyond the budget: HTTP %d, Retry-After %q", r.status, r.retryAfter)
			}
			refused++
		case <-time.After(20 * time.Second):
			t.Fatalf("%d uploads refused, want 4", refused)
		}
	}
	written.Wait()
	// Wait for the endpoint to read what the kernel still buffers, then
	// for the heap to settle; it must never exceed the bound.
	const bound = ingress.DefaultMaxBodyBytes + 8<<20
	var last uint64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		h := heapInUse()
		if h > base && h-base > bound {
			t.Fatalf("the endpoint holds %d MiB over its baseline with 8 stalled uploads, bound %d MiB", (h-base)>>20, bound>>20)
		}
		if h > last && h-last < 1<<20 && h-base > 3*size {
			break // settled, with the admitted bodies read
		}
		last = h
	}
	select {
	case r := <-results:
		t.Fatalf("a stalled upload was answered: HTTP %d", r.status)
	default:
	}
	runtime.KeepAlive(payload)
}

// One client IP holds at most its share of the body budget (half of it,
// at least one body of the largest size): its uploads stalled at the
// share leave room for another client's request, rather than hold the
// whole budget and have every other client answered 503.
func TestOpenAIBodyShare(t *testing.T) {
	t.Parallel()
	const maxBody = 1 << 20
	e := startEdgesWith(t, "quic", frame.SecurityAEAD, nil, nil, &ingress.Limits{MaxBodyBytes: 2 * maxBody},
		func(c *ingress.Config) { c.MaxBody = maxBody })
	results := make(chan int, 2)
	for range 2 {
		c := rawHTTPFrom(t, e.base, "127.0.0.1")
		go func() {
			c.SetDeadline(time.Now().Add(20 * time.Second))
			fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: m2md\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", maxBody)
			c.Write(bytes.Repeat([]byte(" "), 600<<10)) // then stalls
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return // closed at the end of the test
			}
			results <- resp.StatusCode
		}()
	}
	select {
	case status := <-results:
		if status != http.StatusTooManyRequests {
			t.Fatalf("an upload over its client's share: HTTP %d, want 429", status)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("two stalled uploads of one client hold the whole body budget: none was refused")
	}
	c := rawHTTPFrom(t, e.base, "127.0.0.2")
	c.SetDeadline(time.Now().Add(10 * time.Second))
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: m2md\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("another client while one holds its share: HTTP %d, want 200", resp.StatusCode)
	}
}

// An HTTP client that asks for a stream and never reads it: once a write
// cannot complete within Limits.WriteTimeout the request ends, the
// provider gets CANCEL (the upstream sees its request cancelled), and the
// endpoint's memory returns to its baseline.
func TestOpenAINeverReadStreamCancelled(t *testing.T) {
	e := startEdgesWith(t, "quic", frame.SecurityAEAD, nil, nil, &ingress.Limits{WriteTimeout: 500 * time.Millisecond})
	base := heapInUse()
	c := rawHTTP(t, e.base)
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetReadBuffer(4 << 10) // a small window, as a reader that stopped
	}
	body := `{"model":"endless-stream","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: m2md\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	select {
	case <-e.upstream.cancelled:
	case <-time.After(30 * time.Second):
		t.Fatal("the provider's request was not cancelled while its stream was never read")
	}
	waitOutstanding(t, e.d, 0)
	deadline := time.Now().Add(10 * time.Second)
	for {
		h := heapInUse()
		if h < base || h-base < 8<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the endpoint holds %d MiB over its baseline after the stream ended", (h-base)>>20)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A hostile agent on the endpoint's host claims the endpoint's agent id,
// again and again: the daemon closes the endpoint's session (REPLACED),
// and the endpoint claims its id back and serves again within seconds
// instead of answering 503 until a restart.
func TestOpenAIAgentIDClaimedBack(t *testing.T) {
	e := startEdges(t, "ws", frame.SecurityAEAD, nil, nil)
	c := e.sdk("any")
	for round := range 3 {
		hostile := dialClient(t, e.d.url("ws"), client.Options{AgentID: ingress.OpenIdentity, TLSConfig: e.d.clientTLS(t)})
		deadline := time.Now().Add(15 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := c.Chat.Completions.New(ctx, chatParams("gpt-4o"))
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the endpoint does not serve after its agent id was claimed: %v", round, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		select {
		case <-hostile.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the claimant still holds the endpoint's id", round)
		}
	}
}

// A provider's Retry-After reaches the HTTP client as it was sent up to
// ingress.MaxRetryAfter, and clamped there beyond: a provider cannot tell
// the clients of the endpoint to stay away for years.
func TestOpenAIRetryAfterClamped(t *testing.T) {
	e := startEdges(t, "quic", frame.SecurityAEAD, nil, nil)
	for model, want := range map[string]string{
		"rate-limited":         "7",
		"rate-limited-forever": strconv.Itoa(int(ingress.MaxRetryAfter / time.Second)),
	} {
		r, err := http.Post(e.base+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
		if r.StatusCode != http.StatusTooManyRequests || r.Header.Get("Retry-After") != want {
			t.Errorf("%s: HTTP %d, Retry-After %q, want %q", model, r.StatusCode, r.Header.Get("Retry-After"), want)
		}
	}
}

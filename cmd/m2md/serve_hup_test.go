package main

import (
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// SIGHUP, a service manager's reload, never ends serve: without a keys
// file there is nothing to reload, and it says so.
func TestServeSurvivesSIGHUP(t *testing.T) {
	p, _ := startServe(t, t.TempDir())
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitOutput(`SIGHUP: nothing to reload`, 20*time.Second)
	if !p.running() {
		t.Fatalf("serve ended on SIGHUP (code %d)\nstderr: %s", p.code, p.stderr.String())
	}
}

// --openai-max-conns-per-ip bounds the endpoint's connections of one
// client: over it, the next is answered 429 at once.
func TestServeOpenAILimitFlags(t *testing.T) {
	p, _ := startServe(t, t.TempDir(), "--openai-addr", "127.0.0.1:0", "--openai-max-conns-per-ip", "1", "--openai-max-conns", "8", "--openai-body-budget", "32MiB")
	addr := p.waitOutput(`"addr":"(127\.0\.0\.1:\d+)"[^\n]*OpenAI-compatible ingress listening`, 60*time.Second)
	first, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	// The first is admitted once the endpoint answers on it.
	if _, err := io.WriteString(first, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	first.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := first.Read(make([]byte, 1)); err != nil {
		t.Fatalf("the first connection: %v", err)
	}
	second, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	second.SetReadDeadline(time.Now().Add(20 * time.Second))
	got, _ := io.ReadAll(second)
	if !strings.HasPrefix(string(got), "HTTP/1.1 429") {
		t.Fatalf("a second connection of one IP under --openai-max-conns-per-ip 1: %q", got)
	}
}

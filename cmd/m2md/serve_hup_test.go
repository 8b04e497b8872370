package main

import (
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

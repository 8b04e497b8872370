package leakcheck

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) { os.Exit(Main(m, "leakcheck.parked")) }

//go:noinline
func parked(started, stop chan struct{}) {
	close(started)
	<-stop
}

// A goroutine running matched code is found while it runs and not after;
// the test's own goroutine is never reported.
func TestGoroutines(t *testing.T) {
	started, stop := make(chan struct{}), make(chan struct{})
	go parked(started, stop)
	<-started
	if left := Goroutines("leakcheck.parked"); len(left) != 1 || !strings.Contains(left[0], "leakcheck.parked") {
		t.Fatalf("running goroutine: %q", left)
	}
	close(stop)
	if left := Wait(5*time.Second, "leakcheck.parked"); len(left) != 0 {
		t.Fatalf("ended goroutine still reported: %q", left)
	}
	if left := Goroutines("leakcheck.TestGoroutines"); len(left) != 0 {
		t.Fatalf("the test itself reported: %q", left)
	}
}

package ingress

import (
	"testing"
	"time"
)

// A zero Limits field is its documented default, a negative one removes
// the bound (0 inside), and a positive one is kept.
func TestLimitsDefaults(t *testing.T) {
	got := Limits{}.withDefaults()
	want := Limits{IdleTimeout: 2 * time.Minute, ReadHeaderTimeout: 10 * time.Second, BodyTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, MaxConns: 4096, MaxConnsPerIP: 512, MaxBodyBytes: 64 << 20}
	if got != want {
		t.Errorf("zero value: %+v, want %+v", got, want)
	}
	if got := (Limits{IdleTimeout: -1, ReadHeaderTimeout: -1, BodyTimeout: -1, WriteTimeout: -1, MaxConns: -1, MaxConnsPerIP: -1, MaxBodyBytes: -1}).withDefaults(); got != (Limits{}) {
		t.Errorf("negative: %+v, want no bounds", got)
	}
	set := Limits{IdleTimeout: 1, ReadHeaderTimeout: 2, BodyTimeout: 3, WriteTimeout: 4, MaxConns: 5, MaxConnsPerIP: 6, MaxBodyBytes: 7}
	if got := set.withDefaults(); got != set {
		t.Errorf("set: %+v, want %+v", got, set)
	}
}

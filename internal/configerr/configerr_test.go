package configerr

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestErrorWrapsAndNamesField(t *testing.T) {
	sentinel := errors.New("pkg: invalid configuration")
	cause := errors.New("no such file")
	err := fmt.Errorf("outer: %w", New("pkg.Config.File", "%w: pkg.Config.File: %w", sentinel, cause))
	var ce *Error
	if !errors.As(err, &ce) || ce.Field != "pkg.Config.File" {
		t.Fatalf("errors.As: %v, %+v", err, ce)
	}
	if !errors.Is(err, sentinel) || !errors.Is(err, cause) {
		t.Fatalf("%v does not wrap its sentinel and cause", err)
	}
	if got, want := err.Error(), "outer: pkg: invalid configuration: pkg.Config.File: no such file"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
}

func TestOrDefault(t *testing.T) {
	n := 0
	if err := OrDefault("pkg.Config.N", &n, 7); err != nil || n != 7 {
		t.Fatalf("zero: %d, %v; want the default 7", n, err)
	}
	d := -time.Second
	err := OrDefault("pkg.Config.D", &d, time.Minute)
	var ce *Error
	if !errors.As(err, &ce) || ce.Field != "pkg.Config.D" || err.Error() != "pkg.Config.D is -1s; it must be positive (0 means the default, 1m0s)" {
		t.Fatalf("negative: %v", err)
	}
	if d != -time.Second {
		t.Fatalf("negative changed to %v", d)
	}
}

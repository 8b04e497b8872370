package bench

import (
	"errors"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		rep  LoadReport
		want string // "" means no error
	}{
		{"clean", LoadReport{Result: Result{Run: RunM2M, RoundTrips: 100}}, ""},
		{"some errors", LoadReport{Result: Result{Run: RunM2M, RoundTrips: 100, Errors: 99, ErrorsByReason: map[string]int64{"timeout": 99}}}, ""},
		{"rate limited", LoadReport{Result: Result{Run: RunM2M, RoundTrips: 10, Errors: 90, ErrorsByReason: map[string]int64{"rate_limited": 80, "timeout": 10}}}, "--messages-per-minute"},
		{"baseline only", LoadReport{Result: Result{Run: RunM2M, RoundTrips: 10}, Baseline: &Result{Run: RunRelay, Errors: 5, ErrorsByReason: map[string]int64{"connection_lost": 5}}}, "relay run"},
		{"nothing completed", LoadReport{Result: Result{Run: RunM2M, WarmupErrors: 7}}, "no request completed"},
		{"unknown reason", LoadReport{Result: Result{Run: RunM2M, Errors: 3, ErrorsByReason: map[string]int64{"mystery": 3}}}, "errors row"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.rep.Check()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrMostlyFailed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check() = %v, want it to say %q", err, tc.want)
			}
		})
	}
}

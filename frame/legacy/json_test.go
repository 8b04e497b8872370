package legacy

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// Expected strings from zmij's own test suite (tests/test.rs), the
// formatter of serde_json 1.0.149, plus the layout borders.
func TestAppendFloatZmijVectors(t *testing.T) {
	tests := []struct {
		f    float64
		want string
	}{
		{6.62607015e-34, "6.62607015e-34"},
		{math.SmallestNonzeroFloat64, "5e-324"},
		{1e-323, "1e-323"},
		{1.2e-322, "1.2e-322"},
		{1.24e-322, "1.24e-322"},
		{1.234e-320, "1.234e-320"},
		{1.0, "1.0"},
		{0.0, "0.0"},
		{math.Copysign(0, -1), "-0.0"},
		{-4.932096661796888e-226, "-4.932096661796888e-226"},
		{3.439070283483335e+35, "3.439070283483335e+35"},
		{6.606854224493745e-17, "6.606854224493745e-17"},
		{6.079537928711555e+61, "6.079537928711555e+61"},
		{1e15, "1000000000000000.0"},
		{1e16, "1e+16"},
		{1.5e16, "1.5e+16"},
		{0.00001, "0.00001"},
		{0.000001, "1e-6"},
		{123.456, "123.456"},
		{math.MaxFloat64, "1.7976931348623157e+308"},
	}
	for _, tc := range tests {
		if got := string(appendFloat(nil, tc.f)); got != tc.want {
			t.Errorf("appendFloat(%v) = %s, want %s", tc.f, got, tc.want)
		}
	}
}

// The float writer against an independent formulation of ryu's layout
// (strconv's fixed format inside the plain range), over random doubles of
// every magnitude.
func TestAppendFloatLayout(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200_000; i++ {
		f := math.Float64frombits(rng.Uint64())
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		if i%4 == 0 { // also plenty of values near the plain/exponent borders
			f = float64(rng.IntN(2_000_000)-1_000_000) * math.Pow(10, float64(rng.IntN(44)-22))
		}
		got := string(appendFloat(nil, f))
		want := modelNumber(strconv.FormatFloat(f, 'e', -1, 64))
		if got != want {
			t.Fatalf("appendFloat(%v) = %s, want %s", f, got, want)
		}
		back, err := strconv.ParseFloat(got, 64)
		if err != nil || back != f {
			t.Fatalf("appendFloat(%v) = %s does not round-trip", f, got)
		}
	}
}

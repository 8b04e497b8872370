package negotiate

import (
	"bytes"
	"testing"
)

func TestSessionID(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		id := randomSessionID()
		if !ValidSessionID(id) || seen[id] {
			t.Fatalf("%q", id)
		}
		seen[id] = true
	}
	for _, id := range []string{"", "sess_", "sess_AbCdEfGhIjKlMnOpQrS", "sess_AbCdEfGhIjKlMnOpQrStU", "Sess_AbCdEfGhIjKlMnOpQrSt",
		"sess_AbCdEfGhIjKlMnOpQr-t", "9b2e6a4c-1f0d-4c3e-8a55-0c1d2e3f4a5b"} {
		if ValidSessionID(id) {
			t.Errorf("%q accepted", id)
		}
	}
}

// Bytes 248..255 are dropped (rejection sampling), the rest map mod 62.
func TestSessionIDRejectionSampling(t *testing.T) {
	in := append(bytes.Repeat([]byte{255, 248}, 6), 0, 61, 62, 87)
	in = append(in, make([]byte, 32-len(in))...)
	id, err := newSessionID(bytes.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if want := "sess_A9AZAAAAAAAAAAAAAAAA"; id != want {
		t.Fatalf("%q, want %q", id, want)
	}
	// Uniformity over many draws: each of the 62 characters within 15% of
	// the mean (a biased mapping would give 5 characters a 25% excess).
	counts := map[byte]int{}
	r := newScript("uniformity")
	const draws = 4000
	for range draws {
		id, err := newSessionID(r)
		if err != nil {
			t.Fatal(err)
		}
		for i := len(sessionIDPrefix); i < len(id); i++ {
			counts[id[i]]++
		}
	}
	mean := float64(draws*sessionIDRandLen) / 62
	for c, n := range counts {
		if float64(n) < 0.85*mean || float64(n) > 1.15*mean {
			t.Errorf("%q drawn %d times, mean %.0f", c, n, mean)
		}
	}
	if len(counts) != 62 {
		t.Fatalf("%d distinct characters", len(counts))
	}
}

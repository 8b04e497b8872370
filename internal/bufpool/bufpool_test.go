package bufpool

import "testing"

func TestGetSizes(t *testing.T) {
	for _, n := range []int{0, 1, 511, 512, 513, 4096, 4097, 1 << 20, 1<<25 + 1} {
		b := Get(n)
		if len(*b) != n || cap(*b) < n {
			t.Fatalf("Get(%d): len %d cap %d", n, len(*b), cap(*b))
		}
		if n > 0 && n <= 1<<maxShift && cap(*b) >= 2*n && n > 512 {
			t.Fatalf("Get(%d): class too large: cap %d", n, cap(*b))
		}
		Put(b)
	}
}

func TestReuseAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under -race")
	}
	Put(Get(1000))
	allocs := testing.AllocsPerRun(100, func() {
		b := Get(1000)
		Put(b)
	})
	if allocs > 0 {
		t.Fatalf("steady-state Get/Put allocated %v times", allocs)
	}
}

// TestPutForeignBufferIgnored: a buffer whose capacity is not one of the
// classes' is left alone, and Get never hands it out, where a buffer of
// the wrong size would be a slice shorter than asked for or memory shared
// with its owner.
func TestPutForeignBufferIgnored(t *testing.T) {
	Put(nil)
	for _, c := range []int{256, 1000, 1536, 3 << 10, 1 << 26} {
		b := make([]byte, 10, c)
		Put(&b)
		if len(b) != 10 {
			t.Fatalf("cap %d: Put reset a foreign buffer to len %d", c, len(b))
		}
		for range 8 {
			g := Get(min(c, 4<<10))
			if cap(*g) > 0 && &(*g)[:1][0] == &b[0] {
				t.Fatalf("cap %d: Get handed out a foreign buffer", c)
			}
		}
	}
}
